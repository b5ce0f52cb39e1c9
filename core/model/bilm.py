"""The bidirectional language model: char CNN + forward and backward LSTM stacks.

    char_ids                                [batch, tokens, chars]
      -> <S> at 0, </S> at len + 1          [batch, tokens + 2, chars]
      -> char CNN: layer 0                  [batch, tokens + 2, P]
      -> forward stack over <S> w1 .. wn </S>, backward stack over </S> wn .. w1 <S>
      -> cat(layer0, layer0), cat(fwd_l, bwd_l)          [L + 1, batch, tokens + 2, 2P]
      -> drop <S>/</S> unless keep_sentence_boundaries   [L + 1, batch, tokens, 2P]

Peters et al. 2018, section 3.1, and docs/bilm_tf.md §2, §5. Stateless unless
`stateful=True` carries LSTM states across batches, as the original did (§6).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple, Protocol

import torch
from torch import nn

from .capture import TORCHSCRIPT_REFUSAL, capturing, refuse_torchscript
from .char_cnn import CharCNN, TrainingPath
from .characters import BOS_TOKEN, EOS_TOKEN, word_to_char_ids
from .options import BiLMOptions
from .precision import keep_bf16_copies
from .recurrence.lstm import LSTMStack, LSTMState, RunDirections, StackOutputs, reverse_index, sort_rows
from .recurrence.scan import scan_stacks

__all__ = ["BiLM", "BiLMOutput"]


class BiLMOutput(NamedTuple):
    """What `BiLM.forward` returns.

    Attributes:
        activations: Every biLM layer, zero at padding. Layer 0 is the char CNN's vector
            twice, layer l >= 1 is forward then backward layer l.
            Shape [n_layers + 1, batch, tokens, 2 * projection_dim].
        mask: bool [batch, tokens], True = real position.
    """

    activations: torch.Tensor
    mask: torch.Tensor


Stacks = tuple[LSTMStack, LSTMStack]  # forward, backward


class TokenVectors(Protocol):
    """What a biLM is handed as its layer-0 cache (`elmo_core.runtime.TokenCache`)."""

    def lookup(self, words: torch.Tensor, char_cnn: nn.Module) -> torch.Tensor:
        """[num_words, chars] distinct words -> [num_words, P], as `char_cnn(words)`."""
        ...

    def clear(self) -> None: ...


class StackRunner(Protocol):
    """How a biLM runs its LSTMs (`elmo_core.model.recurrence.Recurrence`)."""

    def threads(self, device: torch.device) -> AbstractContextManager: ...

    def plan(self, stacks: Stacks, tokens: torch.Tensor, *, stateful: bool, dropout: bool) -> Any:
        """The plan of one pass over [batch, steps, P] layer-0 vectors."""
        ...

    def run(self, plan: Any, stacks: Stacks, tokens: torch.Tensor, lengths: torch.Tensor) -> StackOutputs: ...


def distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.unique(rows, dim=0, return_inverse=True)`, from 1-D `torch.unique` calls.

    `unique(dim=0)` compares rows one at a time on the CPU. Here columns are packed into
    int64 keys, each prefixed with the rank of the columns before it.

    Shape: rows [n, width] -> ([distinct, width], [n])
    """
    n, width = rows.shape
    if n == 0 or width == 0:
        return torch.unique(rows, dim=0, return_inverse=True)
    bits = max(1, int(rows.max()).bit_length())  # per column value
    rank_bits = max(1, n.bit_length())  # ranks are < n
    per_key = max(1, (63 - rank_bits) // bits)  # columns per int64 key
    if rank_bits + bits > 63:  # values too wide to pack: torch's own path
        return torch.unique(rows, dim=0, return_inverse=True)
    shifts = torch.arange(per_key - 1, -1, -1, device=rows.device) * bits  # most significant first
    rank = torch.zeros(n, dtype=torch.int64, device=rows.device)
    for start in range(0, width, per_key):
        block = rows[:, start : start + per_key].long()
        key = (block << shifts[-block.shape[1] :]).sum(dim=1)  # [n], disjoint bits: exact
        rank = torch.unique((rank << (bits * block.shape[1])) | key, return_inverse=True)[1]
    first = torch.empty(int(rank.max()) + 1, dtype=torch.int64, device=rows.device)
    first.scatter_(0, rank, torch.arange(n, device=rows.device))  # one row of each rank
    return rows[first], rank


def check_char_ids(char_ids: object, max_characters_per_token: int, n_characters: int) -> torch.Tensor:
    """`char_ids` as int64, after a clear error unless they are valid [batch, tokens, chars] ids.

    Any integer dtype that holds every id is accepted.
    """
    if not isinstance(char_ids, torch.Tensor):
        raise TypeError(
            f"char_ids must be a torch.Tensor; got {type(char_ids).__name__}. "
            "Build it with `char_ids, mask = elmo_core.words_to_char_ids(sentences)` (a pair)."
        )
    if char_ids.dim() != 3 or char_ids.shape[-1] != max_characters_per_token:
        raise ValueError(
            f"char_ids must be 3-D [batch, tokens, {max_characters_per_token}]; got shape "
            f"{tuple(char_ids.shape)}. Did you pass word ids? Use words_to_char_ids()."
        )
    dtype = char_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or torch.iinfo(dtype).max < n_characters - 1:
        raise TypeError(
            f"char_ids must be an integer tensor whose dtype holds ids up to {n_characters - 1} (int16, int32 or "
            f"int64); got dtype {dtype}. Make them as int64 (words_to_char_ids and ElmoTokenizer do), or "
            "convert ids held in a wide enough dtype with char_ids.long()."
        )
    if char_ids.numel() and not capturing():  # a graph reads no values into Python: ids are not checked
        low, high = int(char_ids.min()), int(char_ids.max())
        if low < 0 or high >= n_characters:
            raise ValueError(
                f"char_ids must lie in [0, {n_characters}); found values from {low} to {high}. "
                "Ids are UTF-8 bytes + 1 and markers 257..261 (see elmo_core.model.characters); "
                "0 marks a padded position."
            )
    return char_ids.long()  # no copy when they are int64 already


def _check_part(name: str, value: object, method: str) -> None:
    if value is not None and not hasattr(value, method):
        raise TypeError(
            f"{name} must be an object with a {method} method (see elmo_core.runtime.parts), or None; got {value!r}. "
            "To choose parts by name or size, load with load_elmo(..., recurrence='step', token_cache_words=n)."
        )


class BiLM(nn.Module):
    """The ELMo biLM (frozen feature extractor or trainable language model).

    Args:
        options: The model's hyperparameters.
        stateful: Carry each row's LSTM states into the next batch, as the original did.
        keep_sentence_boundaries: Also return the `<S>`/`</S>` positions.
        dropout: Dropout on each LSTM layer's input in training (bilm-tf: 0.1).
        token_cache: A layer-0 cache, or None. Skipped while the char CNN trains.
        recurrence: How the LSTMs run, or None: the step loop every fast path equals.
        char_cnn_training: The char CNN's path for a pass that differentiates it.

    Raises:
        TypeError: for a part given as a mode name or a word count (loader settings).
    """

    bos_char_ids: torch.Tensor  # buffers (not saved): the char ids of <S> and </S>, [C] int64
    eos_char_ids: torch.Tensor

    def __init__(
        self,
        options: BiLMOptions,
        *,
        stateful: bool = False,
        keep_sentence_boundaries: bool = False,
        dropout: float = 0.0,
        token_cache: TokenVectors | None = None,
        recurrence: StackRunner | None = None,
        char_cnn_training: TrainingPath | None = None,
    ) -> None:
        super().__init__()
        self.options = options
        self.stateful = stateful
        self.keep_sentence_boundaries = keep_sentence_boundaries
        lstm = options.lstm
        _check_part("recurrence", recurrence, "plan")
        _check_part("token_cache", token_cache, "lookup")
        _check_part("char_cnn_training", char_cnn_training, "__call__")
        self.char_cnn = CharCNN(options, training_path=char_cnn_training)
        stack_args = (
            lstm.projection_dim,
            lstm.dim,
            lstm.projection_dim,
            lstm.n_layers,
            lstm.cell_clip,
            lstm.proj_clip,
            lstm.use_skip_connections,
            dropout,
        )
        self.forward_layers = LSTMStack(*stack_args)
        self.backward_layers = LSTMStack(*stack_args)
        C = options.char_cnn.max_characters_per_token
        self.register_buffer("bos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.register_buffer("eos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.reset_buffers()
        # Stateful mode: per direction, per layer (h, c) with rows in batch-row order.
        self._states: dict[str, list[LSTMState]] | None = None
        self.token_cache = token_cache
        self.recurrence = recurrence

    @property
    def output_dim(self) -> int:
        """Width of every layer: `2 * projection_dim`."""
        return self.options.output_dim

    @property
    def n_outputs(self) -> int:
        """`n_layers + 1`: layer 0, then each LSTM layer."""
        return self.options.n_outputs

    def reset_buffers(self) -> None:
        """Fill the char ids of `<S>` and `</S>`. Not saved: a model built on the meta device needs this."""
        C = self.options.char_cnn.max_characters_per_token
        with torch.no_grad():
            self.bos_char_ids.copy_(torch.tensor(word_to_char_ids(BOS_TOKEN, C)))
            self.eos_char_ids.copy_(torch.tensor(word_to_char_ids(EOS_TOKEN, C)))

    def __prepare_scriptable__(self) -> BiLM:
        """`torch.jit.script` calls this first: refuse at once."""
        raise RuntimeError(TORCHSCRIPT_REFUSAL)

    def reset_states(self) -> None:
        """Forget carried LSTM states (stateful mode): the next batch starts from zeros."""
        self._states = None

    # ------------------------------------------------------------------ forward
    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> BiLMOutput:
        """Run the char CNN and both LSTM stacks.

        Args:
            char_ids: Ids from `words_to_char_ids`, without `<S>`/`</S>`, right-padded with zeros.
            mask: True for real tokens, on a prefix of each row. Default: any id non-zero.

        Shape:
            char_ids: [batch, tokens, chars] int64
            mask: [batch, tokens] bool
            activations: [n_layers + 1, batch, tokens, 2 * projection_dim]

        Raises:
            ValueError / TypeError: for ids of the wrong shape, dtype or range, or a
                mask that is not right-padded.
        """
        refuse_torchscript()
        C = self.options.char_cnn.max_characters_per_token
        char_ids = check_char_ids(char_ids, C, self.options.char_cnn.n_characters)
        # keep_bf16_copies: bf16 copies of trainable weights live for this pass (precision.py)
        with self.threads(), keep_bf16_copies():
            return self._forward(char_ids, mask, self.bos_char_ids.device)

    def threads(self) -> AbstractContextManager:
        """The recurrence's thread rule, for the forward and the caller's work on its outputs.

        A no-op while `torch.compile` traces: threads are process state.
        """
        if self.recurrence is None or torch.compiler.is_compiling():
            return nullcontext()
        return self.recurrence.threads(self.bos_char_ids.device)

    def _forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None, device: torch.device) -> BiLMOutput:
        char_ids = char_ids.to(device)
        real = (char_ids != 0).any(dim=-1) if mask is None else _check_mask(mask, char_ids).to(device)
        ids, full_lengths, full_mask = self._add_sentence_boundaries(char_ids, real)
        token_embedding = self._token_embedding(ids, full_mask)  # [batch, tokens + 2, P]
        forward_out, backward_out, order = self._run_stacks(token_embedding, full_lengths)
        activations = self._gather_activations(token_embedding, forward_out, backward_out, order)
        if self.keep_sentence_boundaries:
            return BiLMOutput(activations, full_mask)
        activations *= real[None, :, :, None].to(activations.dtype)
        return BiLMOutput(activations, real)

    def _add_sentence_boundaries(
        self, char_ids: torch.Tensor, real: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ids [batch, tokens + 2, chars], lengths [batch] and mask [batch, tokens + 2]."""
        batch_size, num_tokens, C = char_ids.shape
        device = char_ids.device
        lengths = real.sum(dim=1)  # [batch]
        positions = torch.arange(num_tokens, device=device)
        if not capturing() and not torch.equal(real, positions[None, :] < lengths[:, None]):
            raise ValueError(
                "padding must be on the right: every row of the mask (or of non-zero char_ids) "
                "must be True for its first n positions and False after. Build inputs with "
                "words_to_char_ids()."
            )
        ids = char_ids.new_zeros(batch_size, num_tokens + 2, C)
        ids[:, 1 : num_tokens + 1] = char_ids * real[..., None]
        ids[:, 0] = self.bos_char_ids
        ids[torch.arange(batch_size, device=device), lengths + 1] = self.eos_char_ids
        full_lengths = lengths + 2
        full_mask = torch.arange(num_tokens + 2, device=device)[None, :] < full_lengths[:, None]
        return ids, full_lengths, full_mask

    def _gather_activations(
        self,
        token_embedding: torch.Tensor,
        forward_out: list[torch.Tensor],
        backward_out: list[torch.Tensor],
        order: torch.Tensor,
    ) -> torch.Tensor:
        """Every layer, written once from the stacks' sorted outputs: no extra per-layer copy."""
        batch_size, num_steps, P = token_embedding.shape
        num_tokens = num_steps - 2
        keep = slice(None) if self.keep_sentence_boundaries else slice(1, num_tokens + 1)  # caller's mask zeroes </S>
        if capturing():  # rows in batch order: concatenations, no scatter into a buffer
            token_layer = torch.cat([token_embedding, token_embedding], dim=-1)  # [batch, steps, 2P]
            lstm_layers = [torch.cat(pair, dim=-1).transpose(0, 1) for pair in zip(forward_out, backward_out)]
            return torch.stack([token_layer, *lstm_layers])[:, :, keep]  # [L + 1, batch, T, 2P]
        dtype = forward_out[-1].dtype
        activations = token_embedding.new_empty(
            len(forward_out) + 1,
            batch_size,
            num_steps if self.keep_sentence_boundaries else num_tokens,
            2 * P,
            dtype=dtype,
        )
        activations[0, ..., :P] = token_embedding[:, keep]  # layer 0: the token vector twice
        activations[0, ..., P:] = token_embedding[:, keep]
        for k in reversed(range(len(forward_out))):
            for half, outputs in ((slice(0, P), forward_out), (slice(P, 2 * P), backward_out)):
                y = outputs.pop().transpose(0, 1)[:, keep].to(dtype)  # layer k [sorted batch, T, P], freed once copied
                activations[k + 1, ..., half].index_copy_(0, order, y)  # row r of y is batch row order[r]
        return activations

    def _token_embedding(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if capturing():  # no shape from the data in a graph: every position, padding zeroed
            vectors = self.char_cnn(ids.flatten(0, 1)).view(*mask.shape, -1)  # [batch, steps, P]
            return vectors * mask[..., None].to(vectors.dtype)
        # The char CNN has no context: it runs once per distinct word.
        words, inverse = distinct_rows(ids[mask])  # [distinct, chars], [num_real]
        cache = self.token_cache
        parameters = list(self.char_cnn.parameters())
        # A char CNN in training recomputes every word: the vectors carry the graph, or the
        # weights change at the next step. The cache notices every other change of the weights.
        char_cnn_trains = any(p.requires_grad for p in parameters) and (torch.is_grad_enabled() or self.training)
        if cache is None or char_cnn_trains:
            vectors = self.char_cnn(words)
        else:  # nothing to differentiate: reuse earlier vectors of the same words
            vectors = cache.lookup(words, self.char_cnn)
        embedded = vectors[inverse]  # [num_real, P]
        out = embedded.new_zeros(*mask.shape, embedded.shape[-1])
        out[mask] = embedded
        return out

    def _run_stacks(self, tokens: torch.Tensor, lengths: torch.Tensor) -> StackOutputs:
        if capturing():  # the masked recurrence as a scan, rows in batch order
            if self.stateful:
                raise ValueError("a graph cannot carry a stateful biLM's LSTM states: export with stateful=False.")
            order = torch.arange(tokens.shape[0], device=tokens.device)
            return (*scan_stacks((self.forward_layers, self.backward_layers), tokens, lengths), order)
        if self.recurrence is None:  # the reference: the step loop with torch's threads
            return self.run_sorted(tokens, lengths)
        stacks = (self.forward_layers, self.backward_layers)
        dropout = self.training and any(stack.dropout for stack in stacks)
        plan = self.recurrence.plan(stacks, tokens, stateful=self.stateful, dropout=dropout)
        if plan.fast:  # paired, CUDA graphs or time chunks: elmo_core.model.recurrence
            return self.recurrence.run(plan, stacks, tokens, lengths)
        return self.run_sorted(tokens, lengths, fused=plan.path == "fused", run_directions=plan.run_directions)

    def run_sorted(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        *,
        fused: bool = False,
        run_directions: RunDirections | None = None,
    ) -> StackOutputs:
        """Both stacks over the rows sorted longest first: the step loop or torch's fused LSTM.

        The backward stack reads each row reversed over its own length: it starts at `</S>`.
        `run_directions` runs the two directions, given as callables. The result's `order` is the sort order.

        Shape: tokens [batch, steps, P] right-padded, lengths [batch]
        """
        batch_size, num_steps, _ = tokens.shape
        sorted_lengths, order, batch_sizes = sort_rows(lengths, num_steps)
        x = tokens.index_select(0, order).transpose(0, 1)  # [steps, batch, P], sorted rows
        # The same index reverses each row over its own length and undoes the reversal.
        reverse = reverse_index(sorted_lengths, num_steps)[..., None]  # [steps, batch, 1]

        def flip(t: torch.Tensor) -> torch.Tensor:
            return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

        forward_init, backward_init = self._initial_states(order, batch_size)
        run = {"fused": fused, "final_state": self.stateful}  # final states feed only the carry-over
        if run_directions is not None:
            backward_x = flip(x)
            (forward_out, forward_final), (backward_out, backward_final) = run_directions(
                lambda: self.forward_layers(x, batch_sizes, forward_init, **run),
                lambda: self.backward_layers(backward_x, batch_sizes, backward_init, **run),
            )
        else:
            forward_out, forward_final = self.forward_layers(x, batch_sizes, forward_init, **run)
            x = flip(x)  # the sorted input is not needed any more: one copy alive, not two
            backward_out, backward_final = self.backward_layers(x, batch_sizes, backward_init, **run)
        backward_out = [flip(y) for y in backward_out]
        if self.stateful:
            self._store_states(order, forward_final, backward_final)
        return forward_out, backward_out, order

    # ------------------------------------------------------------------ stateful mode
    def _initial_states(
        self, order: torch.Tensor, batch_size: int
    ) -> tuple[list[LSTMState] | None, list[LSTMState] | None]:
        if not self.stateful or self._states is None:
            return None, None

        def take(h: torch.Tensor) -> torch.Tensor:
            # Rows beyond the stored ones start from zero (the batch grew).
            if h.shape[0] < batch_size:
                h = torch.cat([h, h.new_zeros(batch_size - h.shape[0], *h.shape[1:])])
            return h[:batch_size].index_select(0, order)

        forward, backward = ([(take(h), take(c)) for h, c in self._states[d]] for d in ("forward", "backward"))
        return forward, backward

    def _store_states(
        self, order: torch.Tensor, forward_final: list[LSTMState], backward_final: list[LSTMState]
    ) -> None:
        batch_size = order.shape[0]
        new: dict[str, list[LSTMState]] = {}
        for direction, finals in (("forward", forward_final), ("backward", backward_final)):
            layers = []
            for k, (h, c) in enumerate(finals):
                h = h.detach().float()
                c = c.detach().float()
                h_rows = torch.empty_like(h)
                c_rows = torch.empty_like(c)
                h_rows[order] = h  # back to batch-row order
                c_rows[order] = c
                if self._states is not None:
                    old_h, old_c = self._states[direction][k]
                    if old_h.shape[0] > batch_size:  # rows beyond this batch keep their old states
                        h_rows = torch.cat([h_rows, old_h[batch_size:]])
                        c_rows = torch.cat([c_rows, old_c[batch_size:]])
                layers.append((h_rows, c_rows))
            new[direction] = layers
        self._states = new


def _check_mask(mask: object, char_ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(char_ids.shape[:2]):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a [batch, tokens] = {tuple(char_ids.shape[:2])} tensor; got {shape}.")
    return mask.bool()
