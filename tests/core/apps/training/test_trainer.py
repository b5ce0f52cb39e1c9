from __future__ import annotations

import copy
import json
import os
import random
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist

from elmo_core.apps.training import trainer as trainer_module
from elmo_core.apps.training.checkpoint import CHECKPOINT_NAME, load_checkpoint_file
from elmo_core.apps.training.config import TrainConfig
from elmo_core.apps.training.data import TrainingStream, make_batch
from elmo_core.apps.training.optimizer import make_optimizer
from elmo_core.apps.training.perplexity import evaluate
from elmo_core.apps.training.train_log import LOG_NAME
from elmo_core.apps.training.trainer import RELEASE_EVERY, Trainer
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model.errors import ElmoError
from elmo_core.model.precision import cpu_bf16_support
from tests.core.apps.training.conftest import make_corpus, make_lm, write_lines


def make_trainer(tmp_path, vocab, train_file, *, out, max_steps, optimizer="adam"):
    lm = make_lm(vocab, seed=0, dropout=0.1)  # dropout on: the RNG state must be restored too
    stream = TrainingStream([train_file], vocab, batch_tokens=48, buffer_sentences=7, seed=0)
    config = TrainConfig(
        optimizer=optimizer,
        max_steps=max_steps,
        progress=False,
        checkpoint_every=5,
        validate_every=4,
        log_every=2,
        seed=0,
    )
    valid = make_corpus(10, seed=9)
    return Trainer(lm, vocab, stream, config, valid_sentences=valid, out_dir=tmp_path / out)


@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_resuming_from_a_checkpoint_reproduces_the_losses_exactly(tmp_path, optimizer):
    corpus = make_corpus(25, seed=4)  # a few batches per epoch: the run crosses epochs
    train_file = write_lines(tmp_path / "train.txt", corpus)
    vocab = Vocabulary.build(corpus)
    straight: list[float] = []
    make_trainer(tmp_path, vocab, train_file, out="straight", max_steps=14, optimizer=optimizer).fit(
        callback=lambda step, r: straight.append(r.loss)
    )

    first: list[float] = []
    make_trainer(tmp_path, vocab, train_file, out="split", max_steps=5, optimizer=optimizer).fit(
        callback=lambda step, r: first.append(r.loss)
    )
    # Disturb every global generator: the checkpoint must bring them back.
    random.seed(123), np.random.seed(123), torch.manual_seed(123)
    resumed = make_trainer(tmp_path, vocab, train_file, out="split", max_steps=14, optimizer=optimizer)
    resumed.load_checkpoint(tmp_path / "split" / CHECKPOINT_NAME)
    assert resumed.step == 5
    second: list[float] = []
    resumed.fit(callback=lambda step, r: second.append(r.loss))

    assert len(straight) == 14 and len(first) == 5
    assert first + second == straight  # exactly, not approximately
    steps = [json.loads(line)["step"] for line in (tmp_path / "split" / LOG_NAME).read_text().splitlines()]
    assert steps == [2, 4, 5, 6, 8, 10, 12, 14]


def test_the_trainers_fused_adam_makes_torchs_plain_adam_updates_and_adagrad_starts_at_one():
    torch.manual_seed(0)
    weights = [torch.randn(5, 3), torch.randn(7)]
    grads = [[torch.randn_like(w) for w in weights] for _ in range(3)]
    fused_params = [torch.nn.Parameter(w.clone()) for w in weights]
    plain_params = [torch.nn.Parameter(w.clone()) for w in weights]
    fused = make_optimizer(fused_params, TrainConfig(max_steps=1, lr=0.01))
    plain = torch.optim.Adam(plain_params, lr=0.01)
    assert fused.param_groups[0]["fused"] is True
    for step_grads in grads:
        for params, optimizer in ((fused_params, fused), (plain_params, plain)):
            for p, g in zip(params, step_grads):
                p.grad = g.clone()
            optimizer.step()
    for a, b, start in zip(fused_params, plain_params, weights):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
        assert (a.detach() - start).abs().max() > 0.01  # three steps of up to lr = 0.01 each: it moved
    adagrad = make_optimizer(plain_params, TrainConfig(max_steps=1, optimizer="adagrad"))
    assert isinstance(adagrad, torch.optim.Adagrad) and adagrad.param_groups[0]["lr"] == 0.2
    assert adagrad.param_groups[0]["initial_accumulator_value"] == 1.0


def test_checkpoint_holds_what_an_exact_resume_needs(tmp_path, train_file, vocab):
    trainer = make_trainer(tmp_path, vocab, train_file, out="run", max_steps=3)
    summary = trainer.fit()
    assert summary["step"] == 3 and summary["tokens"] == trainer.tokens_seen > 0
    assert summary["valid_ppl"] == pytest.approx((summary["valid_forward_ppl"] * summary["valid_backward_ppl"]) ** 0.5)
    state = load_checkpoint_file(tmp_path / "run" / CHECKPOINT_NAME)  # weights_only=True
    assert state["step"] == 3 and state["world_size"] == 1
    assert set(state["ranks"][0]) == {"stream", "rng"} and state["ranks"][0]["stream"]["taken"] >= 1
    assert state["vocab"] == vocab.tokens
    rows = [json.loads(line) for line in (tmp_path / "run" / LOG_NAME).read_text().splitlines()]
    assert rows[-1]["step"] == 3 and rows[-1]["valid_ppl"] == pytest.approx(summary["valid_ppl"])
    assert set(rows[0]) == {
        "step",
        "tokens",
        "train_ppl",
        "valid_forward_ppl",
        "valid_backward_ppl",
        "valid_ppl",
        "elapsed_s",
        "lr",
    }


def test_trainer_stops_after_max_hours(tmp_path, train_file, vocab):
    trainer = make_trainer(tmp_path, vocab, train_file, out="run", max_steps=10_000)
    trainer.config.max_hours = 1e-9
    assert trainer.fit()["step"] == 0


def test_the_trainer_hands_freed_heap_back_every_release_every_steps(tmp_path, train_file, vocab, monkeypatch):
    calls = []
    monkeypatch.setattr(trainer_module, "release_free_memory", lambda: calls.append(trainer.step))
    trainer = make_trainer(tmp_path, vocab, train_file, out="run", max_steps=2 * RELEASE_EVERY + 3)
    trainer.fit()
    assert calls == [RELEASE_EVERY, 2 * RELEASE_EVERY]


def test_a_batch_taken_but_not_trained_goes_back_to_the_stream(tmp_path, train_file, vocab):
    # Under DDP all ranks stop together when one rank's stream ends: the others have then taken
    # a batch they do not train, and their checkpoints must not skip it.
    trainer = make_trainer(tmp_path, vocab, train_file, out="run", max_steps=100)
    agreements = []

    def another_rank_ran_out(flag: bool) -> bool:  # each step agrees twice: on the time, then on the data
        agreements.append(flag)
        return flag or (len(agreements) % 2 == 0 and trainer.step == 5)

    trainer._agree = another_rank_ran_out
    assert trainer.fit()["step"] == 5
    fresh = TrainingStream([train_file], vocab, batch_tokens=48, buffer_sentences=7, seed=0)
    batches = iter(fresh)
    for _ in range(5):
        next(batches)
    assert trainer.stream.state_dict() == fresh.state_dict()
    next(batches)  # the batch taken and put back: without the put-back the trainer would be here
    assert trainer.stream.state_dict() != fresh.state_dict()


def test_max_epochs_needs_a_stream_that_counts_its_passes(tmp_path, train_file, vocab):
    config = TrainConfig(max_epochs=1, progress=False)
    batches = [make_batch([["the", "cat"]], vocab)] * 3
    with pytest.raises(ValueError, match="max_epochs needs a TrainingStream"):
        Trainer(make_lm(vocab), vocab, batches, config)
    stream = TrainingStream([train_file], vocab, batch_tokens=48, buffer_sentences=7, seed=0)
    one_pass = sum(
        1 for _ in TrainingStream([train_file], vocab, batch_tokens=48, buffer_sentences=7, seed=0, epochs=1)
    )
    assert Trainer(make_lm(vocab), vocab, stream, config).fit()["step"] == one_pass


def test_train_config_explains_bad_settings():
    with pytest.raises(ValueError, match="give max_steps, max_hours or max_epochs"):
        TrainConfig()
    with pytest.raises(ValueError, match="optimizer must be 'adam' or 'adagrad'"):
        TrainConfig(max_steps=1, optimizer="sgd")


# ---------------------------------------------------------------------- data parallel
STEPS = 3
DDP_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
"""Two processes average two gradients where one process sums one: the same maths in a
different floating-point order. After 3 Adam steps at lr 1e-2 the parameters agree to
within 5.4e-6 (measured); the tolerance leaves room for other CPUs' kernels. The test
takes ~5 s (two spawned processes), so it is not marked slow."""


def ddp_batches(vocab):
    """Per-rank batches for STEPS steps, and the combined batch of each step.

    The rarest word is the softmax's one-word tail cluster. It occurs only on rank 1 in
    step 1, nowhere in step 2 and on both ranks in step 3, so the tail's parameters are
    used by one rank, by none, and by both (DDP must handle all three like one process).
    """
    rare = vocab.tokens[-1]
    corpus = make_corpus(200, seed=7)
    without = [s for s in corpus if rare not in s]
    with_rare = [s for s in corpus if rare in s]
    per_rank = [
        [without[0:3], without[3:6], with_rare[0:1] + without[6:8]],
        [with_rare[1:2] + without[8:10], without[10:13], with_rare[2:3] + without[13:15]],
    ]
    combined = [per_rank[0][k] + per_rank[1][k] for k in range(STEPS)]
    return [[make_batch(s, vocab) for s in rank_sentences] for rank_sentences in per_rank], [
        make_batch(s, vocab) for s in combined
    ]


def ddp_config():
    return TrainConfig(max_steps=STEPS, lr=1e-2, progress=False, checkpoint_every=0, validate_every=0)


def ddp_worker(rank, world_size, port, result_path):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        vocab = Vocabulary.build(make_corpus())
        batches, _ = ddp_batches(vocab)
        lm = make_lm(vocab, seed=0, dropout=0.0)  # no dropout: the two runs must be comparable
        Trainer(lm, vocab, batches[rank], ddp_config()).fit()
        if rank == 0:
            torch.save(lm.state_dict(), result_path)
        dist.barrier()  # leave together: gloo can abort a process whose peer has gone
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_match_one_process_on_the_combined_batch(tmp_path):
    import torch.multiprocessing as mp

    result_path = tmp_path / "ddp.pt"
    mp.spawn(ddp_worker, args=(2, free_port(), str(result_path)), nprocs=2, join=True)
    ddp_state = torch.load(result_path, weights_only=True)

    vocab = Vocabulary.build(make_corpus())
    _, combined = ddp_batches(vocab)
    lm = make_lm(vocab, seed=0, dropout=0.0)
    initial = {k: v.clone() for k, v in lm.state_dict().items()}
    Trainer(lm, vocab, combined, ddp_config()).fit()
    moved = 0
    for name, tensor in lm.state_dict().items():
        torch.testing.assert_close(ddp_state[name], tensor, **DDP_TOLERANCE, msg=name)
        moved += not torch.equal(tensor, initial[name])
    assert moved > 10  # the comparison is not between two untrained models


def test_fitting_twice_continues_where_the_first_fit_stopped(tmp_path, train_file, vocab):
    from elmo_core.apps.training.data import PrefetchingStream

    once: list[float] = []
    make_trainer(tmp_path, vocab, train_file, out="once", max_steps=6).fit(callback=lambda s, r: once.append(r.loss))
    trainer = make_trainer(tmp_path, vocab, train_file, out="twice", max_steps=3)
    trainer.stream = PrefetchingStream(trainer.stream, depth=2)
    twice: list[float] = []
    trainer.fit(callback=lambda s, r: twice.append(r.loss))
    trainer.config.max_steps = 6
    trainer.fit(callback=lambda s, r: twice.append(r.loss))
    assert twice == once


# ---------------------------------------------------------------------- early stopping
def scripted_validation(trainer, perplexities):
    """Make `trainer.validate` return these average perplexities in turn, and record at
    which step each was asked for (the real one is tested above)."""
    asked = []

    def validate():
        asked.append(trainer.step)
        ppl = perplexities[len(asked) - 1]
        nll = float(np.log(ppl)) * 10
        return trainer_module.Perplexity(nll, nll, 10, 2, 0)

    trainer.validate = validate
    return asked


def early_stopping_trainer(tmp_path, vocab, train_file, patience, max_steps=100):
    lm = make_lm(vocab, seed=0, dropout=0.1)
    stream = TrainingStream([train_file], vocab, batch_tokens=48, buffer_sentences=7, seed=0)
    config = TrainConfig(max_steps=max_steps, patience=patience, validate_every=2, checkpoint_every=3, progress=False)
    return Trainer(lm, vocab, stream, config, valid_sentences=make_corpus(4, seed=9), out_dir=tmp_path / "run")


def bilm_weights(folder):
    from elmo_core.apps.training.model import load_language_model

    return load_language_model(folder)[0].bilm.state_dict()


def test_early_stopping_stops_after_patience_worse_validations_and_keeps_the_best_weights(tmp_path, train_file, vocab):
    trainer = early_stopping_trainer(tmp_path, vocab, train_file, patience=2)
    # Before the first step, then at steps 2, 4, 6, 8: the best is at step 4, and the two
    # validations after it are worse, so the run stops at step 8.
    asked = scripted_validation(trainer, [100.0, 90.0, 80.0, 85.0, 81.0, 1.0])
    weights = {}
    trainer_callback = lambda step, result: weights.__setitem__(step, copy_bilm(trainer))  # noqa: E731
    summary = trainer.fit(callback=trainer_callback)
    assert asked == [0, 2, 4, 6, 8]
    assert summary["step"] == 8 and summary["stopped_early"] is True
    assert summary["best_step"] == 4 and summary["best_valid_ppl"] == pytest.approx(80.0)
    assert summary["valid_ppl"] == pytest.approx(81.0)  # the last validation
    saved = bilm_weights(tmp_path / "run")
    for name, tensor in weights[4].items():
        torch.testing.assert_close(saved[name], tensor, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(saved[n], t) for n, t in weights[8].items())  # not the last step's
    rows = [json.loads(line) for line in (tmp_path / "run" / LOG_NAME).read_text().splitlines()]
    assert [(r["step"], round(r["valid_ppl"], 6)) for r in rows if r["valid_ppl"]] == [
        (0, 100.0),
        (2, 90.0),
        (4, 80.0),
        (6, 85.0),
        (8, 81.0),
    ]
    assert rows[0]["train_ppl"] is None  # the row before training has no training perplexity
    state = load_checkpoint_file(tmp_path / "run" / CHECKPOINT_NAME)
    assert state["step"] == 8  # the checkpoint is the latest step, for an exact resume
    assert state["early_stopping"] == {"best": pytest.approx(80.0), "best_step": 4, "since_best": 2}


def copy_bilm(trainer):
    return {k: v.detach().clone() for k, v in trainer.lm.bilm.state_dict().items()}


def test_early_stopping_keeps_the_starting_model_when_training_never_beats_it(tmp_path, train_file, vocab):
    trainer = early_stopping_trainer(tmp_path, vocab, train_file, patience=1)
    start = copy_bilm(trainer)
    scripted_validation(trainer, [50.0, 60.0])
    summary = trainer.fit()
    assert summary["step"] == 2 and summary["best_step"] == 0 and summary["stopped_early"] is True
    saved = bilm_weights(tmp_path / "run")
    for name, tensor in start.items():
        torch.testing.assert_close(saved[name], tensor, rtol=0, atol=0, msg=name)


def test_a_resumed_run_keeps_its_best_validation_and_its_count_of_worse_ones(tmp_path, train_file, vocab):
    first = early_stopping_trainer(tmp_path, vocab, train_file, patience=2, max_steps=4)
    scripted_validation(first, [100.0, 90.0, 95.0])  # steps 0, 2 (best), 4 (worse)
    assert first.fit()["stopped_early"] is False
    resumed = early_stopping_trainer(tmp_path, vocab, train_file, patience=2, max_steps=100)
    resumed.load_checkpoint(tmp_path / "run" / CHECKPOINT_NAME)
    asked = scripted_validation(resumed, [96.0, 1.0])  # step 6: the second worse one in a row
    summary = resumed.fit()
    assert asked == [6]  # no new validation before the first resumed step
    assert (summary["step"], summary["best_step"], summary["best_valid_ppl"]) == (6, 2, pytest.approx(90.0))


def test_early_stopping_explains_what_it_needs(tmp_path, vocab):
    with pytest.raises(ValueError, match=r"patience must be >= 1 validations .*; got 0\."):
        TrainConfig(max_steps=1, patience=0)
    with pytest.raises(ValueError, match="patience counts validations, but validate_every is 0"):
        TrainConfig(max_steps=1, patience=1, validate_every=0)
    with pytest.raises(
        ValueError, match="patience watches the validation perplexity, but there are no validation sentences"
    ):
        Trainer(make_lm(vocab), vocab, [], TrainConfig(max_steps=1, patience=1))


@pytest.mark.skipif(cpu_bf16_support() is None, reason="bf16 validation needs a CPU with AVX512-BF16 or AMX")
def test_bf16_validation_after_training_steps_scores_the_current_weights(tmp_path, train_file, vocab):
    """torch's fused Adam does not bump the parameters' version counters, which bf16
    inference keys its weight copies on: validation after the first one scored stale weights."""
    trainer = make_trainer(tmp_path, vocab, train_file, out="run", max_steps=10)
    trainer.precision = "bf16"
    trainer.validate()  # bf16 copies of the weights made here
    for _ in range(3):
        trainer.train_step(next(iter(trainer.stream)))
    got = trainer.validate()
    fresh = copy.deepcopy(trainer.lm)  # new parameter tensors: no copies kept for them
    expected = evaluate(fresh, trainer.valid_sentences, vocab, batch_tokens=trainer.config.valid_batch_tokens,
                        device=torch.device("cpu"), precision="bf16")  # fmt: skip
    assert got.average == pytest.approx(expected.average, rel=1e-6)


def halving_trainer(tmp_path, vocab, train_file, *, max_steps, lr=0.004):
    lm = make_lm(vocab, seed=0, dropout=0.1)
    stream = TrainingStream([train_file], vocab, batch_tokens=48, buffer_sentences=7, seed=0)
    config = TrainConfig(
        max_steps=max_steps,
        lr=lr,
        halve_lr_below=0.05,
        validate_every=2,
        checkpoint_every=2,
        progress=False,
    )
    return Trainer(lm, vocab, stream, config, valid_sentences=make_corpus(4, seed=9), out_dir=tmp_path / "run")


def logged_rates(folder):
    rows = [json.loads(line) for line in (folder / LOG_NAME).read_text().splitlines()]
    return [(r["step"], r["lr"]) for r in rows if r["valid_ppl"] is not None]


def test_the_learning_rate_halves_at_each_validation_under_the_gain_asked_for(tmp_path, train_file, vocab):
    trainer = halving_trainer(tmp_path, vocab, train_file, max_steps=10)
    # Best so far -> the gain each validation needs (5%): 100 sets it; 90 < 95 gains; 88 is not
    # under 85.5 (halve, best stays 90); 80 < 85.5 gains (best 80); 79 is not under 76 (halve).
    scripted_validation(trainer, [100.0, 90.0, 88.0, 80.0, 79.0])
    trainer.fit()
    assert logged_rates(tmp_path / "run") == [(2, 0.004), (4, 0.004), (6, 0.002), (8, 0.002), (10, 0.001)]
    assert trainer.optimizer.param_groups[0]["lr"] == 0.001


def test_a_resumed_run_keeps_the_halving_state(tmp_path, train_file, vocab):
    first = halving_trainer(tmp_path, vocab, train_file, max_steps=6)
    scripted_validation(first, [100.0, 90.0, 88.0])  # steps 2, 4 (best 90), 6 (halved: 0.002)
    first.fit()
    resumed = halving_trainer(tmp_path, vocab, train_file, max_steps=8, lr=None)  # lr None: the checkpoint's
    resumed.load_checkpoint(tmp_path / "run" / CHECKPOINT_NAME)
    assert resumed.optimizer.param_groups[0]["lr"] == 0.002
    scripted_validation(resumed, [86.0])  # not under 0.95 * 90 = 85.5 of the best before the resume
    resumed.fit()
    assert resumed.optimizer.param_groups[0]["lr"] == 0.001
    state = load_checkpoint_file(tmp_path / "run" / CHECKPOINT_NAME)
    assert state["lr_plateau"]["best"] == pytest.approx(90.0)


def test_halving_explains_what_it_needs(tmp_path, vocab):
    with pytest.raises(ValueError, match=r"halve_lr_below is a fraction of the best perplexity in \[0, 1\)"):
        TrainConfig(max_steps=1, halve_lr_below=5.0)
    with pytest.raises(ValueError, match="halve_lr_below acts at validations, but validate_every is 0"):
        TrainConfig(max_steps=1, halve_lr_below=0.05, validate_every=0)
    with pytest.raises(ValueError, match="halve_lr_below watches the validation perplexity, but there are no"):
        Trainer(make_lm(vocab), vocab, [], TrainConfig(max_steps=1, halve_lr_below=0.05))


def test_a_new_trainer_refuses_an_out_dir_that_holds_a_run_and_resumes_when_asked(tmp_path, train_file, vocab):
    """Python's `Trainer` keeps `elmo train`'s rule: a run never overwrites another run's work."""
    make_trainer(tmp_path, vocab, train_file, out="run", max_steps=5).fit()
    out = tmp_path / "run"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = make_trainer(tmp_path, vocab, train_file, out="run", max_steps=8)
    with pytest.raises(ElmoError) as info:
        again.fit()
    message = str(info.value)
    assert "\n" not in message and f"out_dir {out} already holds another run's files" in message
    assert f"trainer.load_checkpoint({str(out / 'checkpoint.pt')!r}) before fit()" in message
    assert "fresh out_dir" in message
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written
    again.load_checkpoint(out / "checkpoint.pt")
    assert again.fit()["step"] == 8  # resumed into its own folder
    assert make_trainer(tmp_path, vocab, train_file, out="fresh", max_steps=2).fit()["step"] == 2
