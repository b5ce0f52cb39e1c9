from __future__ import annotations

import pytest
from typer.testing import CliRunner

from elmo_core import ElmoError, save_model_folder
from elmo_core.apps.cli import app
from elmo_core.apps.probe import plot_probe, read_conll_column, run_probe
from tests.conftest import make_tiny_elmo

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
TAG = {w: ("A", "B", "C")[i % 3] for i, w in enumerate(WORDS)}  # a function of the word


def conll_lines(sentences: list[list[str]], extra: dict[str, str] | None = None) -> str:
    """'word POS NER' lines; POS = TAG[word] (or `extra`), NER = O."""
    tags = {**TAG, **(extra or {})}
    blocks = ["-DOCSTART- -X- -X- O\n"]
    blocks += ["".join(f"{w} {tags[w]} O\n" for w in s) for s in sentences]
    return "\n".join(blocks)


def make_sentences(n: int, offset: int = 0) -> list[list[str]]:
    return [[WORDS[(i * 3 + j + offset) % len(WORDS)] for j in range(2 + i % 4)] for i in range(n)]


@pytest.fixture
def files(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text(conll_lines(make_sentences(40)), encoding="utf-8")
    evaluation = tmp_path / "eval.txt"
    # "zulu" carries a label the training file never has: those tokens are always wrong.
    evaluation.write_text(
        conll_lines(make_sentences(10, offset=1) + [["zulu", "alpha", "zulu"]], {"zulu": "Z"}), encoding="utf-8"
    )
    return train, evaluation


def test_read_conll_column_skips_docstart_and_reads_the_column(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nZorbia NNP B-ORG\ngrows VBZ O\n\t\nTea NN O\n", encoding="utf-8")
    assert read_conll_column(path, 1) == ([["Zorbia", "grows"], ["Tea"]], [["NNP", "VBZ"], ["NN"]])
    assert read_conll_column(path, -1)[1] == [["B-ORG", "O"], ["O"]]


def test_read_conll_column_explains_a_missing_column_and_file(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("Zorbia B-ORG\n", encoding="utf-8")
    with pytest.raises(ElmoError, match=r"line 1: --column 2 needs a label column .* has 2 column\(s\)"):
        read_conll_column(path, 2)
    with pytest.raises(ElmoError, match="does not exist"):
        read_conll_column(tmp_path / "missing.txt", 1)


def test_probe_learns_a_label_that_is_a_function_of_the_word_from_layer_0(files):
    train, evaluation = files
    result = run_probe(
        make_tiny_elmo(),
        read_conll_column(train, 1),
        read_conll_column(evaluation, 1),
        epochs=60,
        lr=0.05,
        batch_size=32,
    )
    eval_tags = [t for tags in read_conll_column(evaluation, 1)[1] for t in tags]
    unseen = eval_tags.count("Z")
    assert result.names == ("layer 0", "layer 1", "layer 2", "average")
    assert result.num_tokens == len(eval_tags) and unseen == 2
    # Layer 0 (char CNN) sees only the word, so it gets every token with a known label.
    assert result.correct[0] == len(eval_tags) - unseen
    for accuracy, correct in zip(result.accuracy, result.correct):
        assert accuracy == pytest.approx(correct / len(eval_tags), abs=0)
        assert correct <= len(eval_tags) - unseen
    majority = max("ABC", key=[t for tags in read_conll_column(train, 1)[1] for t in tags].count)
    assert result.majority_accuracy == pytest.approx(eval_tags.count(majority) / len(eval_tags))


def test_probe_is_deterministic(files):
    train, evaluation = files
    data = read_conll_column(train, 1), read_conll_column(evaluation, 1)
    assert run_probe(make_tiny_elmo(), *data, epochs=2, seed=3) == run_probe(make_tiny_elmo(), *data, epochs=2, seed=3)


def test_probe_refuses_a_single_label(files):
    train, evaluation = files
    with pytest.raises(ElmoError, match="at least 2 values.*--column"):
        run_probe(make_tiny_elmo(), read_conll_column(train, -1), read_conll_column(evaluation, -1))


def test_probe_command_prints_accuracies_and_writes_the_plot(files, tmp_path):
    model_dir = tmp_path / "model"
    save_model_folder(make_tiny_elmo(), model_dir)
    plot = tmp_path / "probe.png"
    args = ["probe", *map(str, files), "--column", "1", "--model", str(model_dir), "--plot", str(plot), "--epochs", "2"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "representation\taccuracy\tcorrect\ttokens"
    assert [line.split("\t")[0] for line in lines[1:]] == ["layer 0", "layer 1", "layer 2", "average", "majority label"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_probe_command_refuses_column_0(files):
    with pytest.raises(ElmoError, match="--column 0 is the token itself"):
        CliRunner().invoke(app, ["probe", *map(str, files), "--column", "0"], catch_exceptions=False)


def test_plot_explains_a_missing_matplotlib(monkeypatch, files, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    result = run_probe(make_tiny_elmo(), read_conll_column(files[0], 1), read_conll_column(files[1], 1), epochs=1)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ElmoError, match=r"pip install 'elmo-bilm\[probe\]'"):
        plot_probe(result, tmp_path / "p.png")


def test_probe_command_shows_its_progress_on_stderr(files, tmp_path):
    model_dir = tmp_path / "model"
    save_model_folder(make_tiny_elmo(), model_dir)
    train, evaluation = (read_conll_column(path, 1) for path in files)
    tokens = sum(map(len, train[0])) + sum(map(len, evaluation[0]))
    steps = 4 * 2 * -(-sum(map(len, train[0])) // 32)  # 3 layers and the average, 2 epochs, 32 tokens a step
    args = ["probe", *map(str, files), "--model", str(model_dir), "--epochs", "2", "--batch-size", "32"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"{tokens}/{tokens}" in result.stderr and f"{steps}/{steps}" in result.stderr
    quiet = CliRunner().invoke(app, [*args, "--no-progress"], catch_exceptions=False)
    assert quiet.stderr == "" and quiet.stdout == result.stdout


@pytest.mark.parametrize("majority", [0.3, 0.97], ids=["majority below the bars", "majority line drawn"])
def test_probe_plot_at_100_percent_has_no_overlapping_text_or_bars(monkeypatch, tmp_path, majority):
    pytest.importorskip("matplotlib")
    from elmo_core.apps.probe import ProbeResult, pyplot

    plt = pyplot()
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))  # keep the figure to measure it
    names = ("layer 0", "layer 1", "layer 2", "average")
    result = ProbeResult(names, (1.0, 1.0, 1.0, 1.0), (500,) * 4, 500, majority, ("A", "B"))
    plot_probe(result, tmp_path / "probe.png", title="linear probe, column 1: train.txt -> eval.txt")
    (fig,) = [f for f in figures if getattr(f, "axes", None)]  # the plot (not plot_path's empty figure)
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    texts = [t for t in [ax.title, *ax.texts, ax.xaxis.label, *fig.texts] if t.get_text()]
    legend = ax.get_legend()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    boxes += [("legend", legend.get_window_extent(renderer))] if legend is not None else []
    assert any(f"{majority * 100:.1f}%" in text for text, _ in boxes)  # the majority label is said
    assert [text for text, _ in boxes].count("100.0") == 4  # each bar's label
    from matplotlib.transforms import Bbox

    bars = [Bbox.intersection(patch.get_window_extent(renderer), ax.bbox) for patch in ax.patches]  # as drawn
    for i, (text, box) in enumerate(boxes):
        for other, other_box in boxes[i + 1 :]:
            assert not box.overlaps(other_box), (text, other)
        for bar in bars:
            assert not box.overlaps(bar), text
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), text  # inside the image


PROSE = "The bank by the river was quiet that morning .\nShe walked to the bank to pay in a cheque .\n"


def test_probe_command_refuses_prose_given_as_a_conll_file(files, tmp_path):
    prose = tmp_path / "raw.txt"
    prose.write_text(PROSE, encoding="utf-8")
    for args in ([prose, files[1]], [files[0], prose]):
        with pytest.raises(ElmoError, match=r"raw.txt is not a CoNLL file: line 2 .* has 11 columns, line 1 10"):
            CliRunner().invoke(app, ["probe", *map(str, args)], catch_exceptions=False)


def test_read_conll_column_refuses_a_token_line_without_a_label(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("Zorbia NNP\ngrows\n", encoding="utf-8")
    with pytest.raises(ElmoError, match=r"x.txt is not a CoNLL file: line 2 \('grows'\) has no label column"):
        read_conll_column(path, 1)


def test_probe_command_warns_when_no_eval_label_occurs_in_train(files, tmp_path):
    model_dir = tmp_path / "model"
    save_model_folder(make_tiny_elmo(), model_dir)
    other = tmp_path / "other_labels.txt"
    other.write_text(conll_lines(make_sentences(5), {w: "Q" + TAG[w] for w in WORDS}), encoding="utf-8")
    args = ["probe", str(files[0]), str(other), "--model", str(model_dir), "--epochs", "1", "--no-progress"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: no label of EVAL occurs in TRAIN (column 1; EVAL has QA, QB, QC)" in result.stderr
    assert all(line.split("\t")[1] == "0.0000" for line in result.stdout.splitlines()[1:])  # what it warns of
    shared = CliRunner().invoke(app, [*args[:2], str(files[1]), *args[3:]], catch_exceptions=False)
    assert shared.exit_code == 0 and "warning" not in shared.stderr
