# Generated from hf_elmo/modeling_elmo.py by `python -m hf_elmo.remote_code.generate`. Do not edit: edit that file.
"""ELMo as a transformers model: ElmoModel and its token and sequence classifiers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput

from .elmo_reference import (
    BiLM, bilm_is_trainable, capturing, CharCNNOptions, check_char_ids, Elmo, Highway, mix_representations, run_bilm,
    ScalarMix,
)
from .elmo_reference_runtime import (
    count_non_finite, non_finite_error, NON_FINITE_FIX, note_which_code_runs, read_as_the_core_reads, read_in_windows,
    release_when_collected, save_atomically, serving_parts, window_batches,
)

from .configuration_elmo import ElmoConfig

__all__ = [
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoModel",
    "ElmoForTokenClassification",
    "ElmoForSequenceClassification",
]


@dataclass
class ElmoModelOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    representations: tuple[torch.Tensor, ...] | None = None


def _loaded(tensor: torch.Tensor) -> bool:  # filled from the checkpoint by from_pretrained
    return getattr(tensor, "_is_hf_initialized", False)


class ElmoPreTrainedModel(PreTrainedModel):
    config: ElmoConfig
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    _no_split_modules = ["BiLM"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # elmo_core's own initialisation (the constructors' values), for what was not loaded.
        if isinstance(module, BiLM):
            module.reset_buffers()  # the <S>/</S> char ids: non-persistent, never in a checkpoint
        own = list(module.parameters(recurse=False))
        reset_parameters = getattr(module, "reset_parameters", None)
        if reset_parameters is None or not own or all(_loaded(p) for p in own):
            return
        kept = [(p, p.detach().clone()) for p in own if _loaded(p)]  # a partly loaded module
        reset_parameters()  # ScalarMix, CharCNN (char_embedding), torch's Linear/Conv1d
        for p, value in kept:
            p.copy_(value)
        highway = self._highway_holding(module)
        if highway is not None and isinstance(module, nn.Linear) and not _loaded(module.bias):
            highway.init_carry_bias(module)

    def _highway_holding(self, layer: nn.Module) -> Highway | None:
        # transformers skips modules without parameters of their own (Highway): its layers are found here.
        for module in self.modules():
            if isinstance(module, Highway) and any(candidate is layer for candidate in module.layers):
                return module
        return None

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        loaded = read_as_the_core_reads(super().from_pretrained, source, cls)(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True
        note_which_code_runs(source)
        for name, tensor in model.state_dict().items():
            bad = count_non_finite(tensor)
            if bad:
                raise non_finite_error(source, f"tensor '{name}'", bad, NON_FINITE_FIX)
        model.freeze_bilm()  # transformers makes every loaded tensor trainable
        return loaded

    def freeze_bilm(self) -> None:
        fixed_mix = self.config.scalar_mix_parameters is not None
        for module in self.modules():
            if isinstance(module, BiLM) or (fixed_mix and isinstance(module, ScalarMix)):
                module.requires_grad_(False)

    def get_input_embeddings(self) -> nn.Module:
        return cast(ElmoModel, self.base_model).bilm.char_cnn

    def set_input_embeddings(self, value: nn.Module) -> None:
        raise ValueError(
            "ElmoModel's input layer is the pretrained char CNN (characters -> token vectors), not a word "
            f"embedding, so it cannot be replaced by a {type(value).__name__}. Load other ELMo weights instead "
            "(from_pretrained, or elmo convert for bilm-tf files)."
        )

    def resize_token_embeddings(  # type: ignore[override]  # returns the char CNN: ELMo has no nn.Embedding
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, *args: Any, **kwargs: Any
    ) -> nn.Module:
        return self.get_input_embeddings()

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        if self._auto_class is not None:
            module = type(self).__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.ElmoModel",
                "AutoModelForTokenClassification": f"{module}.ElmoForTokenClassification",
                "AutoModelForSequenceClassification": f"{module}.ElmoForSequenceClassification",
            }
        code = ("modeling_elmo.py", "configuration_elmo.py") if self._auto_class is not None else ()
        save_atomically(super().save_pretrained, save_directory, *code)(save_directory, *args, **kwargs)


def _char_ids(input_ids: torch.Tensor | None, char_ids: torch.Tensor | None, options: CharCNNOptions) -> torch.Tensor:
    # Checked before the windows cut them. input_ids may be the char ids themselves (3-D).
    check = (options.max_characters_per_token, options.n_characters)
    if char_ids is not None:
        if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and isinstance(char_ids, torch.Tensor):
            if tuple(input_ids.shape) != tuple(char_ids.shape[:2]):
                raise ValueError(
                    f"input_ids {tuple(input_ids.shape)} and char_ids {tuple(char_ids.shape)} disagree on "
                    "[batch, tokens]; pass both from the same ElmoTokenizer call (or char_ids alone)."
                )
        return check_char_ids(char_ids, *check)
    if input_ids is None:
        raise ValueError(
            "ElmoModel needs input_ids or char_ids: the character ids [batch, tokens, 50] that ElmoTokenizer "
            "returns as char_ids."
        )
    if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2:
        raise ValueError(
            f"input_ids of shape {tuple(input_ids.shape)} are one id per token, but ELMo reads characters: "
            "pass the char_ids [batch, tokens, 50] that ElmoTokenizer returns with them "
            "(model(**tokenizer(texts, return_tensors='pt')) does)."
        )
    return check_char_ids(input_ids, *check)


class ElmoModel(ElmoPreTrainedModel):
    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_output_representations < 1:
            raise ValueError(
                "ElmoModel needs num_output_representations >= 1 (last_hidden_state is the first scalar mix); "
                f"got {config.num_output_representations}. Use output_hidden_states=True for the raw biLM layers."
            )
        # The runtime's parts (recurrence path, thread rule, cache): none in a saved folder's code.
        core = Elmo(config.to_options(), **config.elmo_settings(), **serving_parts())
        dtype = getattr(config, "dtype", None)  # from_pretrained(..., dtype=...)
        dtype = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point and dtype != torch.float32:
            core.to(dtype)  # the core builds float32 whatever torch's default dtype
        self.bilm: BiLM = core.bilm
        self.scalar_mixes: nn.ModuleList = core.scalar_mixes
        self._window_batches = window_batches()
        release_when_collected(self.bilm)  # a dropped model's heap goes back to the OS
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ElmoModelOutput | tuple[torch.Tensor, ...]:
        input_ids = _char_ids(input_ids, char_ids, self.bilm.options.char_cnn)
        if output_attentions or (output_attentions is None and getattr(self.config, "output_attentions", False)):
            raise ValueError(
                "output_attentions=True cannot be honoured: ELMo is a biLSTM and has no attention weights. "
                "Leave it unset; output_hidden_states=True gives every biLM layer."
            )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = attention_mask.bool() if isinstance(attention_mask, torch.Tensor) else attention_mask
        frozen = not bilm_is_trainable(self.bilm)  # the core's one rule for "frozen"
        with self.bilm.threads():  # the windows and mixes too: the runtime's thread rule (BiLM.threads)
            activations, out_mask = self._read(input_ids, mask, frozen)
            output = self._mix(activations, out_mask, bool(output_hidden_states))
        return output if return_dict else output.to_tuple()

    def _mix(self, activations: torch.Tensor, out_mask: torch.Tensor, output_hidden_states: bool) -> ElmoModelOutput:
        # The mixes read these very tensors: with a trainable biLM, their .grad exists (as for BERT).
        hidden_states = activations.unbind(0)  # n_layers + 1 x [batch, tokens, 2P]
        mixes, dropout = self.scalar_mixes, self.config.dropout
        representations = mix_representations(mixes, hidden_states, out_mask, dropout, self.training)
        return ElmoModelOutput(
            last_hidden_state=representations[0],
            hidden_states=hidden_states if output_hidden_states else None,
            representations=tuple(representations) if len(representations) > 1 else None,
        )

    def _read(
        self, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # A graph for deployment reads rows whole: the caller cuts long inputs.
        window_tokens = None if self.config.stateful or capturing() else self.config.window_tokens
        windowed = read_in_windows(
            lambda ids, piece_mask: run_bilm(self.bilm, ids, piece_mask, frozen).activations,
            char_ids,
            mask,
            batches=self._window_batches,
            window_tokens=window_tokens,
            window_context=self.config.window_context,
            boundaries=self.bilm.keep_sentence_boundaries,
        )
        if windowed is not None:
            return windowed
        out = run_bilm(self.bilm, char_ids, mask, frozen)  # checks ids: shape, dtype, range
        return out.activations, out.mask


class ElmoForTokenClassification(ElmoPreTrainedModel):
    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_labels is None:
            raise ValueError("ElmoForTokenClassification needs labels: set config.id2label (or num_labels).")
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self.classifier = nn.Linear(config.output_dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[torch.Tensor, ...]:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            char_ids=char_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        logits = self.classifier(outputs.last_hidden_state)  # [batch, tokens, num_labels]
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(logits.shape[:2]):
                raise ValueError(
                    f"labels must be [batch, tokens] = {tuple(logits.shape[:2])}; got {tuple(labels.shape)}. "
                    "Pad labels with -100 (DataCollatorForTokenClassification does)."
                )
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)
        return output if return_dict else output.to_tuple()


class ElmoForSequenceClassification(ElmoPreTrainedModel):
    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_labels is None:
            raise ValueError("ElmoForSequenceClassification needs labels: set config.id2label (or num_labels).")
        if config.keep_sentence_boundaries:
            raise ValueError(
                "ElmoForSequenceClassification pools over the text's tokens; keep_sentence_boundaries=True "
                "adds the <S>/</S> positions. Set keep_sentence_boundaries=False."
            )
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self.classifier = nn.Linear(config.output_dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput | tuple[torch.Tensor, ...]:
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            char_ids=char_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        vectors = outputs.last_hidden_state  # [batch, tokens, 2P]
        mask = _real_tokens(input_ids, attention_mask, char_ids).to(vectors.device)  # [batch, tokens]
        logits = self.classifier(_pool(vectors, mask, self.config.classifier_pooling))  # [batch, num_labels]
        loss = None
        if labels is not None:
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config, **kwargs)
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)
        return output if return_dict else output.to_tuple()


def _real_tokens(
    input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, char_ids: torch.Tensor | None
) -> torch.Tensor:
    if attention_mask is not None:
        return attention_mask.bool()
    ids = cast(torch.Tensor, char_ids if char_ids is not None else input_ids)  # ElmoModel checked them
    return ids.ne(0).any(-1)


def _pool(vectors: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    # [batch, tokens, dim], mask [batch, tokens] -> [batch, dim]; zeros for a text without tokens.
    if vectors.shape[1] == 0:
        return vectors.new_zeros(vectors.shape[0], vectors.shape[2])
    if how == "first":
        return vectors[:, 0] * mask[:, :1].to(vectors.dtype)  # right padding: token 0 is real if any is
    if how == "max":
        pooled = vectors.masked_fill(~mask[..., None], float("-inf")).amax(dim=1)  # [batch, dim]
        return torch.where(mask.any(dim=1, keepdim=True), pooled, torch.zeros_like(pooled))
    weights = mask[..., None].to(vectors.dtype)  # [batch, tokens, 1]
    return (vectors * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # the mean over real tokens
