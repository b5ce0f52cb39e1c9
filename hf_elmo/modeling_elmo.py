"""ELMo as a transformers model: ElmoModel and its task models (token and sequence classification).

The modules are elmo_core's (`BiLM`, `ScalarMix`), held directly as `self.bilm` and
`self.scalar_mixes`, so the state dict has the keys of `elmo_core.Elmo` (`bilm.*`,
`scalar_mixes.*`; `elmo.` in front inside a task model): a folder written by
`elmo_core.save_model_folder` loads with `ElmoModel.from_pretrained`, and one written by
`save_pretrained` loads with `elmo_core.load_model_folder`.

    char_ids        [batch, tokens, 50]  character ids (ElmoTokenizer; no <S>/</S>); also
                                         accepted as input_ids (ElmoTokenizer's input_ids
                                         are one id per token, [batch, tokens])
      -> biLM                            n_layers + 1 layers [batch, tokens, 2P]  = hidden_states
      -> scalar mix(es) + dropout        [batch, tokens, 2P]                      = last_hidden_state
      -> (token classification) linear   [batch, tokens, num_labels]
      -> (sequence classification) pool over the real tokens, linear   [batch, num_labels]
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
    check_model_folder,
    count_non_finite,
    folder_variant,
    mix_representations,
    non_finite_error,
    read_in_windows,
    release_when_collected,
    run_bilm,
    serving_parts,
    window_batches,
)
from hf_elmo.remote_code import (  # absolute: a saved folder reads these from its elmo_reference.py
    note_which_code_runs,
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
        last_hidden_state: The ELMo vectors: the first scalar mix of the biLM layers
            (`gamma * sum_k softmax(w)_k * h_k`), zero at padded positions.
            [batch, tokens, 2 * projection_dim].
        hidden_states: With `output_hidden_states`: every biLM layer, `n_layers + 1`
            tensors [batch, tokens, 2 * projection_dim]; index 0 is the char CNN's token
            vector (repeated twice to the full width), index l the l-th LSTM layer
            `[forward ; backward]`.
        representations: With `num_output_representations > 1`: every scalar mix,
            `last_hidden_state` first.
    """

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    representations: tuple[torch.Tensor, ...] | None = None


def _loaded(tensor: torch.Tensor) -> bool:
    """True for a tensor that `from_pretrained` filled from the checkpoint."""
    return getattr(tensor, "_is_hf_initialized", False)


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation, saving and loading shared by the ELMo models.

    transformers 5 builds a model on the meta device, loads the checkpoint, then calls
    `_init_weights` on every module: a tensor it loaded carries `_is_hf_initialized`,
    and `_init_weights` never touches those, so imported weights stay exactly as saved.
    What it does initialise (a missing tensor, or every tensor of a model built from a
    config) gets the value elmo_core's constructors give it, from the core's own methods:
    `reset_parameters` (ScalarMix, CharCNN, and torch's Linear/Conv1d),
    `Highway.init_carry_bias` and `BiLM.reset_buffers`.
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
        # transformers skips modules without parameters of their own (Highway), so its
        # layers are recognised here.
        for module in self.modules():
            if isinstance(module, Highway) and any(candidate is layer for candidate in module.layers):
                return module
        return None

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """As transformers', and the biLM (and a fixed scalar mix) stay frozen.

        A local folder's config.json is checked against its weights' headers before
        anything is allocated. With elmo-bilm installed, a local folder is read as the core reads it
        (`_read_as_the_core_reads`: its one `variant=` of the weights without naming it,
        and the core's diagnosis of a broken folder).

        transformers 5 wraps every loaded tensor in a new `nn.Parameter` with
        `requires_grad=True`, which would silently make the frozen biLM trainable
        (only the scalar mix is meant to train); this puts the constructor's choice back.
        """
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        load = _shapes_checked_first(super().from_pretrained, cls, source)
        load = _read_as_the_core_reads(load, source)
        loaded = load(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True
        note_which_code_runs(source)
        for name, tensor in model.state_dict().items():
            bad = count_non_finite(tensor)
            if bad:
                raise non_finite_error(source, f"tensor '{name}'", bad, NON_FINITE_FIX)
        model.freeze_bilm()
        return loaded

    def freeze_bilm(self) -> None:
        """Make the biLM (and scalar mixes fixed by the config) untrainable, as built."""
        for module in self.modules():
            if isinstance(module, BiLM):
                module.requires_grad_(False)
            elif isinstance(module, ScalarMix) and self.config.scalar_mix_parameters is not None:
                module.requires_grad_(False)

    # ------------------------------------------------------------------ input embeddings
    def get_input_embeddings(self) -> nn.Module:
        """The char CNN: ELMo's input layer, from characters to token vectors (layer 0).

        There is no word-embedding matrix: every token, whatever its string, is embedded
        from its characters (`char_cnn.char_embedding` holds the character vectors).
        """
        return cast(ElmoModel, self.base_model).bilm.char_cnn

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Refused: the char CNN is part of the biLM's pretrained weights.

        Raises:
            ValueError: always; explains why and what to do instead.
        """
        raise ValueError(
            "ElmoModel's input layer is the pretrained char CNN (characters -> token vectors), not a word "
            f"embedding, so it cannot be replaced by a {type(value).__name__}. Load other ELMo weights instead "
            "(from_pretrained, or elmo convert for bilm-tf files)."
        )

    def resize_token_embeddings(  # type: ignore[override]  # returns the char CNN: ELMo has no nn.Embedding
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, *args: Any, **kwargs: Any
    ) -> nn.Module:
        """Nothing to resize: returns `get_input_embeddings()` (the char CNN), unchanged.

        ELMo reads characters, so a token added to the tokenizer (`tokenizer.add_tokens`)
        already has an input representation; recipes that call
        `model.resize_token_embeddings(len(tokenizer))` after adding tokens work as they
        are. (The config has no `vocab_size`: ELMo has no word vocabulary.)
        """
        return self.get_input_embeddings()

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """As transformers', with the generated, self-contained code files.

        `auto_map` names every model of `modeling_elmo.py`, so that a tagger's folder
        also loads as a base `AutoModel`, and a base model's folder as the start of an
        `AutoModelForTokenClassification` or `AutoModelForSequenceClassification`,
        wherever the folder's code runs. transformers
        copies this module's file (and `configuration_elmo.py`) into the folder; they are
        replaced by their generated copies, which need no elmo-bilm (see
        `hf_elmo.remote_code`).
        """
        if self._auto_class is not None:
            module = type(self).__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.ElmoModel",
                "AutoModelForTokenClassification": f"{module}.ElmoForTokenClassification",
                "AutoModelForSequenceClassification": f"{module}.ElmoForSequenceClassification",
            }
        save = super().save_pretrained
        code: tuple[str, ...] = ("modeling_elmo.py", "configuration_elmo.py", "elmo_reference.py")
        code = code if self._auto_class is not None else ()
        save = save_atomically(save, save_directory, *code)
        save(save_directory, *args, **kwargs)


def _shapes_checked_first(load: Any, cls: Any, source: Any) -> Any:
    """`load` (transformers' `from_pretrained`), after comparing a local folder's weights' headers with the
    shapes its config.json implies, on the meta device: transformers compares them after building the model."""

    def read(*args: Any, **kwargs: Any) -> Any:
        folder = os.fspath(source) if isinstance(source, (str, os.PathLike)) else ""
        weights = os.path.join(folder, "model.safetensors")
        if folder and os.path.isfile(weights) and not kwargs.get("ignore_mismatched_sizes"):
            from safetensors import safe_open

            config = kwargs.get("config")
            config = config if isinstance(config, ElmoConfig) else cls.config_class.from_pretrained(folder)
            with torch.device("meta"):
                expected = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
            prefix = f"{cls.base_model_prefix}."
            with safe_open(weights, framework="pt") as f:
                for key in f.keys():
                    name = next((n for n in (key, prefix + key, key.removeprefix(prefix)) if n in expected), None)
                    shape = tuple(f.get_slice(key).get_shape())
                    if name is not None and shape != expected[name]:
                        raise ValueError(
                            f"{weights}: tensor '{key}' has shape {shape}, but config.json implies {expected[name]}. "
                            "Use the config.json saved with these weights."
                        )
        return load(*args, **kwargs)

    return read


def _read_as_the_core_reads(load: Any, source: Any) -> Any:
    """`load` (transformers' `from_pretrained`), reading a local folder as the core reads it.

    A folder of one variant's weights only (`save_pretrained(d, variant="fp16")`) is read
    as that variant without naming it (`elmo_core.files.folder_variant`). The sizes in
    its config.json are checked against the weights' headers first, before anything is
    allocated (unless `ignore_mismatched_sizes=True`). transformers'
    own errors for a broken folder come from deep inside it ("look at the above report",
    a raw SafetensorError); a local folder gets elmo_core's diagnosis instead
    (`check_model_folder`), which names the file and the fix.
    """
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return load

    def read(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("variant") is None:
            kwargs["variant"] = folder_variant(os.fspath(source))
        if not kwargs.get("ignore_mismatched_sizes"):  # sizes from config.json checked before anything is allocated
            check_model_folder(os.fspath(source), kwargs.get("variant"), sizes_only=True)
        try:
            return load(*args, **kwargs)
        except Exception as err:
            try:
                check_model_folder(os.fspath(source), kwargs.get("variant"))
            except ValueError as problem:  # WeightFileError / OptionsError
                raise problem from err
            raise

    return read


def _char_ids(input_ids: torch.Tensor | None, char_ids: torch.Tensor | None, options: CharCNNOptions) -> torch.Tensor:
    """The char ids to read, checked and as int64: `char_ids`, or `input_ids` when they are char ids (3-D).

    Checked here, before the windows cut them: ids of any integer dtype that holds them
    (`elmo_core.model.check_char_ids`).
    """
    ids = _given_char_ids(input_ids, char_ids)
    return check_char_ids(ids, options.max_characters_per_token, options.n_characters)


def _given_char_ids(input_ids: torch.Tensor | None, char_ids: torch.Tensor | None) -> torch.Tensor | None:
    if char_ids is not None:
        if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and isinstance(char_ids, torch.Tensor):
            if tuple(input_ids.shape) != tuple(char_ids.shape[:2]):
                raise ValueError(
                    f"input_ids {tuple(input_ids.shape)} and char_ids {tuple(char_ids.shape)} disagree on "
                    "[batch, tokens]; pass both from the same ElmoTokenizer call (or char_ids alone)."
                )
        return char_ids
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
    return input_ids


def _asked_dtype(config: ElmoConfig) -> torch.dtype | None:
    """The float dtype `from_pretrained(..., dtype=...)` asked for, if any other than float32.

    transformers records the asked dtype in `config.dtype`. The core builds float32
    whatever torch's default dtype, so another precision comes from this request alone.
    """
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point and dtype != torch.float32:
        return dtype
    return None


def _refuse_attentions(output_attentions: bool | None, config: ElmoConfig) -> None:
    if output_attentions or (output_attentions is None and getattr(config, "output_attentions", False)):
        raise ValueError(
            "output_attentions=True cannot be honoured: ELMo is a biLSTM and has no attention weights. "
            "Leave it unset; output_hidden_states=True gives every biLM layer."
        )


class ElmoModel(ElmoPreTrainedModel):
    """The biLM and its scalar mix(es): contextual word vectors (Peters et al. 2018).

    Stateless by default: a sentence's vectors depend only on its own tokens, not on
    batch mates, padding or earlier calls. The biLM is frozen (no gradient, no autograd
    graph); the scalar mixes are trainable unless the config fixes them. To fine-tune
    the biLM too, call `model.bilm.requires_grad_(True)`.

    Raises:
        ValueError: if `config.num_output_representations` < 1 (there would be no
            `last_hidden_state`).
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_output_representations < 1:
            raise ValueError(
                "ElmoModel needs num_output_representations >= 1 (last_hidden_state is the first "
                f"scalar mix); got {config.num_output_representations}. Use "
                "output_hidden_states=True for the raw biLM layers."
            )
        # The core's construction rules (float32) with the runtime's parts: recurrence path, thread
        # rule, layer-0 cache. A saved folder's code has none: the reference step loop.
        core = Elmo(config.to_options(), **config.elmo_settings(), **serving_parts())
        asked = _asked_dtype(config)
        if asked is not None:
            core.to(asked)
        self.bilm: BiLM = core.bilm
        self.scalar_mixes: nn.ModuleList = core.scalar_mixes
        # Rows are stateless: reading the windows of a long input all at once or in budgeted
        # batches gives the same vectors; the budget bounds memory.
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

        A row longer than `config.window_tokens` (1024) is read in the core's overlapping
        windows, so its vectors are those of `embed_sentences`, `elmo embed` and the spaCy
        component. Shorter rows are read whole, exactly as without windows.

        Args:
            input_ids: `ElmoTokenizer`'s one id per token [batch, tokens] (read only
                for its shape: the biLM reads `char_ids`), or the character ids
                themselves [batch, tokens, 50] when `char_ids` is not given.
            attention_mask: 1 for real tokens, 0 for padding (on the right). Derived
                from the char ids when omitted.
            char_ids: Character ids from `ElmoTokenizer` (or
                `elmo_core.words_to_char_ids`), without `<S>`/`</S>` (the biLM adds
                them). Padded positions are all zeros. Moved to the model's device.
            output_hidden_states: Also return every biLM layer (default:
                `config.output_hidden_states`). They are the tensors the scalar mix
                reads, so with a trainable biLM their gradients exist.
            output_attentions: Must be False or None: ELMo has no attention.
            return_dict: Return an `ElmoModelOutput` rather than a tuple (default:
                `config.return_dict`).

        Returns:
            `ElmoModelOutput`, or the tuple of its non-None fields.

        Shape:
            char_ids: [batch, tokens, 50] int64; input_ids, attention_mask: [batch, tokens]
            last_hidden_state: [batch, tokens, 2 * projection_dim] float
            (tokens + 2 with `keep_sentence_boundaries`)

        Raises:
            ValueError: for missing char ids, ids of the wrong shape or outside
                [0, n_characters), a mask that is not right-padded, or
                `output_attentions=True`.
            TypeError: for char ids that are not an integer tensor, or whose dtype cannot
                hold the ids (int8, uint8); int16 and int32 ids give the int64 ids' vectors.
        """
        input_ids = _char_ids(input_ids, char_ids, self.bilm.options.char_cnn)
        _refuse_attentions(output_attentions, self.config)
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
        """Every scalar mix over the biLM layers [n_layers + 1, batch, tokens, 2P], as an `ElmoModelOutput`."""
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
        """The biLM's activations and mask, a row longer than `config.window_tokens` read in windows.

        The windows are the core's (`elmo_core.runtime.windows.read_in_windows`, the plan of
        `embed_sentences` and the spaCy component). The biLM's working memory is bounded by a
        batch of windows (the runtime's `DEFAULT_BATCH_TOKENS` positions; a saved folder's own
        code, run where elmo-bilm is not installed, reads them all at once), not by the row.
        The scalar mixes and `hidden_states` get the assembled layers, so a trainable mix (and
        a trainable biLM, window by window) gets its gradients as without windows; while
        training, the graphs of all windows are kept until the backward pass.
        """
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
    """ELMo vectors and a linear layer per token (e.g. NER), as in `BertForTokenClassification`.

    The biLM is frozen; what trains is the scalar mix (w, gamma), whose output gets
    `config.dropout` while training, and the linear head. `labels` of -100 are ignored
    by the loss (cross-entropy over the real positions), so label only the positions
    you score.

    Raises:
        ValueError: if the config has no labels (`config.id2label` is None).
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
            char_ids: [batch, tokens, 50]; input_ids, attention_mask, labels: [batch, tokens]
            logits: [batch, tokens, num_labels]

        Raises:
            ValueError: as `ElmoModel.forward`, or if `labels` do not have the shape of
                the scored positions.
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
    """ELMo vectors pooled over each text's real tokens, and a linear layer, as in
    `BertForSequenceClassification`.

    The pooling is `config.classifier_pooling`: "mean" (default), "max" or "first". The
    biLM is frozen; what trains is the scalar mix and the linear head. The loss follows
    transformers' `problem_type` rules: one label is "regression" (MSE), integer labels
    "single_label_classification" (cross-entropy), float labels of shape
    [batch, num_labels] "multi_label_classification" (BCE with logits).

    Raises:
        ValueError: if the config has no labels, or keeps the `<S>`/`</S>` positions
            (`keep_sentence_boundaries`), which are not tokens of the text.
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

        Args: as `ElmoModel.forward`, plus `labels`: class ids [batch] (int), targets
            [batch] or [batch, 1] for regression, or [batch, num_labels] floats for
            multi-label.

        Shape:
            char_ids: [batch, tokens, 50]; input_ids, attention_mask: [batch, tokens]
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
    """True at the real tokens: the attention mask, or the char ids' non-empty rows (as the core derives it)."""
    if attention_mask is not None:
        return attention_mask.bool()
    ids = cast(torch.Tensor, char_ids if char_ids is not None else input_ids)  # ElmoModel checked them
    return ids.ne(0).any(-1)


def _pool(vectors: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """One vector per text from its real tokens' vectors; zeros for a text without tokens.

    Shape: vectors [batch, tokens, dim], mask [batch, tokens] -> [batch, dim]
    """
    if vectors.shape[1] == 0:
        return vectors.new_zeros(vectors.shape[0], vectors.shape[2])
    if how == "first":
        return vectors[:, 0] * mask[:, :1].to(vectors.dtype)  # right padding: token 0 is real if any is
    if how == "max":
        pooled = vectors.masked_fill(~mask[..., None], float("-inf")).amax(dim=1)  # [batch, dim]
        return torch.where(mask.any(dim=1, keepdim=True), pooled, torch.zeros_like(pooled))
    weights = mask[..., None].to(vectors.dtype)  # [batch, tokens, 1]
    return (vectors * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # the mean over real tokens
