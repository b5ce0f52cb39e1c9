"""ELMo as a transformers model: ElmoModel and its token and sequence classifiers.

The modules are elmo_core's, so the state dict keys are `elmo_core.Elmo`'s (`bilm.*`,
`scalar_mixes.*`) and one folder format serves both.

    char_ids [batch, tokens, 50] -> biLM -> n_layers + 1 layers [batch, tokens, 2P] = hidden_states
      -> scalar mix(es) + dropout [batch, tokens, 2P] = last_hidden_state
      -> a linear layer per token [batch, tokens, num_labels], or per pooled text [batch, num_labels]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput

from elmo_core import BiLM, Elmo, ScalarMix
from elmo_core.face_api import (
    NON_FINITE_FIX,
    CharCNNOptions,
    Highway,
    bilm_is_trainable,
    capturing,
    check_char_ids,
    count_non_finite,
    mix_representations,
    non_finite_error,
    read_in_windows,
    release_when_collected,
    run_bilm,
    serving_parts,
    window_batches,
)
from hf_elmo.remote_code import (  # absolute: a saved folder reads these from its reference files
    note_which_code_runs,
    read_as_the_core_reads,
    save_atomically,
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
    """What `ElmoModel` returns.

    Attributes:
        last_hidden_state: The ELMo vectors, `gamma * sum_k softmax(w)_k * h_k`, zero at
            padding. [batch, tokens, 2 * projection_dim].
        hidden_states: With `output_hidden_states`: the `n_layers + 1` biLM layers. Layer 0
            is the char CNN's token vector twice, layer l is LSTM layer l, forward then backward.
        representations: With `num_output_representations > 1`: every scalar mix.
    """

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    representations: tuple[torch.Tensor, ...] | None = None


def _loaded(tensor: torch.Tensor) -> bool:  # filled from the checkpoint by from_pretrained
    return getattr(tensor, "_is_hf_initialized", False)


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation, saving and loading shared by the ELMo models.

    `_init_weights` never touches a loaded tensor, so imported weights stay as saved. A
    missing tensor gets the value elmo_core's constructors give it.
    """

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
        """As transformers', and the biLM (and a fixed scalar mix) stay frozen.

        A local folder's config.json is checked against its weights' headers before anything
        is allocated, and the folder is read as the core reads it (`read_as_the_core_reads`).
        """
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
        """Make the biLM (and scalar mixes fixed by the config) untrainable, as built."""
        fixed_mix = self.config.scalar_mix_parameters is not None
        for module in self.modules():
            if isinstance(module, BiLM) or (fixed_mix and isinstance(module, ScalarMix)):
                module.requires_grad_(False)

    def get_input_embeddings(self) -> nn.Module:
        """The char CNN: ELMo has no word embeddings, every token is read from its characters."""
        return cast(ElmoModel, self.base_model).bilm.char_cnn

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Refused: the char CNN is part of the biLM's pretrained weights.

        Raises:
            ValueError: always.
        """
        raise ValueError(
            "ElmoModel's input layer is the pretrained char CNN (characters -> token vectors), not a word "
            f"embedding, so it cannot be replaced by a {type(value).__name__}. Load other ELMo weights instead "
            "(from_pretrained, or elmo convert for bilm-tf files)."
        )

    def resize_token_embeddings(  # type: ignore[override]  # returns the char CNN: ELMo has no nn.Embedding
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, *args: Any, **kwargs: Any
    ) -> nn.Module:
        """Nothing to resize: returns the char CNN unchanged. An added token is read from its characters."""
        return self.get_input_embeddings()

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """As transformers', with the code files a folder needs without elmo-bilm (`hf_elmo.remote_code`).

        `auto_map` names every model of `modeling_elmo.py`, so a tagger's folder also loads as
        a base `AutoModel`, and a base model's folder starts a classifier.
        """
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
    """The biLM and its scalar mix(es): contextual word vectors (Peters et al. 2018).

    A sentence's vectors depend only on its own tokens (unless `stateful`). The biLM is
    frozen and the scalar mixes train. To fine-tune the biLM, call
    `model.bilm.requires_grad_(True)`.

    Raises:
        ValueError: if `config.num_output_representations` < 1.
    """

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
        """Run the biLM once and every scalar mix over it.

        A row longer than `config.window_tokens` is read in the core's overlapping windows,
        as `embed_sentences` reads it.

        Args:
            input_ids: `ElmoTokenizer`'s one id per token (only its shape is read), or the
                char ids themselves when `char_ids` is not given.
            attention_mask: 1 for real tokens, 0 for padding on the right. Default: from the char ids.
            char_ids: Character ids from `ElmoTokenizer`, without `<S>`/`</S>`. Padding is all zeros.
            output_hidden_states: Also return every biLM layer (default: the config's).
            output_attentions: Must be False or None: ELMo has no attention.
            return_dict: Return an `ElmoModelOutput`, not a tuple (default: the config's).

        Returns:
            `ElmoModelOutput`, or the tuple of its non-None fields.

        Shape:
            char_ids: [batch, tokens, 50] int
            input_ids, attention_mask: [batch, tokens]
            last_hidden_state: [batch, tokens, 2 * projection_dim] (tokens + 2 with `keep_sentence_boundaries`)

        Raises:
            ValueError: for missing char ids, ids of the wrong shape or range, a mask not
                padded on the right, or `output_attentions=True`.
            TypeError: for char ids that are not int16, int32 or int64.
        """
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
        """The biLM's activations [n_layers + 1, batch, tokens, 2P] and mask, long rows read in windows."""
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
    """ELMo vectors and a linear layer per token (e.g. NER), as `BertForTokenClassification`.

    The scalar mix and the linear layer train. Labels of -100 are not scored.

    Raises:
        ValueError: if the config has no labels.
    """

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
        """Scores per token, and the loss when `labels` are given.

        Args: as `ElmoModel.forward`, plus `labels` (-100 = not scored).

        Shape:
            input_ids, attention_mask, labels: [batch, tokens]
            logits: [batch, tokens, num_labels]

        Raises:
            ValueError: as `ElmoModel.forward`, or for `labels` of another shape.
        """
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
    """ELMo vectors pooled over each text's tokens and a linear layer, as `BertForSequenceClassification`.

    The pooling is `config.classifier_pooling`. The loss follows transformers' `problem_type` rules.

    Raises:
        ValueError: if the config has no labels, or keeps the `<S>`/`</S>` positions.
    """

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
        """Scores per text, and the loss when `labels` are given.

        Args: as `ElmoModel.forward`, plus `labels`: class ids [batch], regression targets
            [batch] or [batch, 1], or multi-label floats [batch, num_labels].

        Shape:
            input_ids, attention_mask: [batch, tokens]
            logits: [batch, num_labels]

        Raises:
            ValueError: as `ElmoModel.forward`.
        """
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
