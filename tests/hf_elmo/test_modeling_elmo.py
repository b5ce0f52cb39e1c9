from __future__ import annotations

import copy
import io
import json
import pickle
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForTokenClassification

from elmo_core import embed_sentences, load_model_folder, save_model_folder, words_to_char_ids
from hf_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel, ElmoModelOutput, ElmoTokenizer

from ..conftest import DEVICES, make_tiny_elmo, make_tiny_options, missing_data
from .conftest import TOKENS, WIKIGOLD, batch, make_tiny_hf_model, read_conll


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def test_output_shapes_and_exactly_n_layers_plus_one_hidden_states(tiny_hf_model, tiny_tokenizer):
    out = tiny_hf_model(**batch(tiny_tokenizer), output_hidden_states=True)
    assert isinstance(out, ElmoModelOutput)
    assert out.last_hidden_state.shape == (3, 3, 16)
    # Char CNN layer + 2 LSTM layers, never more or fewer.
    assert len(out.hidden_states) == 3
    assert all(h.shape == (3, 3, 16) for h in out.hidden_states)
    assert out.representations is None
    assert tiny_hf_model(**batch(tiny_tokenizer)).hidden_states is None


def test_outputs_equal_the_core_elmo(tiny_tokenizer):
    core = make_tiny_elmo(dropout=0.0, num_output_representations=2)
    model = make_tiny_hf_model(num_output_representations=2)
    char_ids, mask = words_to_char_ids(TOKENS)
    expected = core(char_ids, mask)
    out = model(**batch(tiny_tokenizer), output_hidden_states=True)
    torch.testing.assert_close(out.last_hidden_state, expected.representations[0], atol=1e-6, rtol=0)
    assert len(out.representations) == 2
    torch.testing.assert_close(torch.stack(out.hidden_states), expected.activations, atol=1e-6, rtol=0)


def test_return_dict_and_output_hidden_states_follow_transformers(tiny_hf_model, tiny_tokenizer):
    inputs = batch(tiny_tokenizer)
    as_tuple = tiny_hf_model(**inputs, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 1
    with_layers = tiny_hf_model(**inputs, return_dict=False, output_hidden_states=True)
    assert len(with_layers) == 2 and len(with_layers[1]) == 3
    tiny_hf_model.config.output_hidden_states = True
    assert len(tiny_hf_model(**inputs).hidden_states) == 3


# Batch mates and padding never change a sentence's vectors.
def test_vectors_do_not_depend_on_batch_mates_or_padding(tiny_hf_model, tiny_tokenizer):
    together = tiny_hf_model(**batch(tiny_tokenizer), output_hidden_states=True)
    padded = tiny_tokenizer(TOKENS, is_split_into_words=True, padding="max_length", max_length=9, return_tensors="pt")
    extra = tiny_hf_model(**padded, output_hidden_states=True)
    for k, sentence in enumerate(TOKENS):
        n = len(sentence)
        alone = tiny_hf_model(**batch(tiny_tokenizer, [sentence]), output_hidden_states=True)
        for got in (together, extra):
            torch.testing.assert_close(got.last_hidden_state[k, :n], alone.last_hidden_state[0], atol=1e-5, rtol=1e-4)
            for layer, layer_alone in zip(got.hidden_states, alone.hidden_states):
                torch.testing.assert_close(layer[k, :n], layer_alone[0], atol=1e-5, rtol=1e-4)
        assert extra.last_hidden_state[k, n:].abs().max() == 0  # padding never gets a vector


# Stateless by default, whatever ran before.
def test_same_sentence_gives_the_same_vectors_on_every_call(saved_model_dir, tiny_tokenizer):
    model = AutoModel.from_pretrained(saved_model_dir)
    inputs = batch(tiny_tokenizer, [["hello", "my", "name", "is", "mud", "."]])
    first = model(**inputs).last_hidden_state
    second = model(**inputs).last_hidden_state
    model(**batch(tiny_tokenizer, [["unrelated", "filler", "words"]] * 8))
    later = model(**inputs).last_hidden_state
    fresh = AutoModel.from_pretrained(saved_model_dir)(**inputs).last_hidden_state
    for other in (second, later, fresh):
        torch.testing.assert_close(other, first, atol=1e-6, rtol=0)


def test_stateful_mode_is_opt_in(tiny_tokenizer):
    model = make_tiny_hf_model(stateful=True)
    inputs = batch(tiny_tokenizer, [["a", "b", "c"]])
    first = model(**inputs).last_hidden_state
    assert (model(**inputs).last_hidden_state - first).abs().max() > 0


def test_bad_character_ids_raise_clear_errors(tiny_hf_model):
    with pytest.raises(ValueError, match=r"char_ids must lie in \[0, 262\); found values from 300 to 300"):
        tiny_hf_model(input_ids=torch.full((1, 2, 50), 300))
    with pytest.raises(ValueError, match=r"char_ids must lie in \[0, 262\)"):
        tiny_hf_model(input_ids=torch.full((1, 2, 50), -1))
    with pytest.raises(ValueError, match="one id per token, but ELMo reads characters: pass the char_ids"):
        tiny_hf_model(input_ids=torch.ones(2, 7, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        tiny_hf_model(input_ids=torch.ones(1, 2, 50))
    with pytest.raises(ValueError, match="needs input_ids or char_ids"):
        tiny_hf_model(attention_mask=torch.ones(1, 2))


# Inputs made on the CPU work with the model on any device.
@pytest.mark.parametrize("device", DEVICES)
def test_cpu_inputs_work_with_the_model_on_any_device(device, tiny_hf_model, tiny_tokenizer):
    inputs = batch(tiny_tokenizer)
    expected = tiny_hf_model(**inputs).last_hidden_state
    model = tiny_hf_model.to(device)
    got = model(**inputs).last_hidden_state
    assert got.device.type == device
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-3)


LOAD_ON_CPU = r"""
import json, sys
import torch
from transformers import AutoModel, AutoTokenizer
assert not torch.cuda.is_available()
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
inputs = tokenizer(json.loads(sys.argv[2]), is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    torch.save(model(**inputs).last_hidden_state, sys.argv[3])
"""


# Nothing in a saved folder ties it to the device it was saved from.
@pytest.mark.gpu
def test_model_saved_from_the_gpu_loads_and_runs_without_one(tmp_path, tiny_tokenizer, hf_env):
    model = make_tiny_hf_model().to("cuda:0")
    assert all(p.device == torch.device("cuda:0") for p in model.parameters())
    inputs = batch(tiny_tokenizer)
    with torch.no_grad():
        on_gpu = model(**inputs).last_hidden_state
    assert on_gpu.device == torch.device("cuda:0")
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    for name in ("config.json", "tokenizer_config.json"):
        assert "cuda" not in (tmp_path / "model" / name).read_text()
    script = tmp_path / "load_on_cpu.py"
    script.write_text(LOAD_ON_CPU, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model"), json.dumps(TOKENS), str(tmp_path / "out.pt")],
        cwd=tmp_path,
        env={**hf_env, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), on_gpu.cpu(), atol=1e-4, rtol=1e-3)


def test_empty_sentences_give_empty_outputs(tiny_hf_model, tiny_tokenizer):
    out = tiny_hf_model(**batch(tiny_tokenizer, [[], ["a"]]))
    assert out.last_hidden_state.shape == (2, 1, 16) and out.last_hidden_state[0].abs().max() == 0
    assert tiny_hf_model(**batch(tiny_tokenizer, [[], []])).last_hidden_state.shape == (2, 0, 16)


def test_keep_sentence_boundaries_adds_two_positions(tiny_tokenizer):
    model = make_tiny_hf_model(keep_sentence_boundaries=True)
    assert model(**batch(tiny_tokenizer)).last_hidden_state.shape == (3, 5, 16)


def test_new_model_initialises_like_the_core():
    model = ElmoModel(ElmoConfig.from_options(make_tiny_options()))
    mix = model.scalar_mixes[0]
    assert torch.equal(mix.scalar_weights, torch.zeros(3)) and torch.equal(mix.gamma, torch.ones(1))
    highway = model.bilm.char_cnn.highway.layers[0]
    assert torch.equal(highway.bias[12:], torch.full((12,), -2.0))
    assert model.bilm.char_cnn.char_embedding.abs().max() <= 1.0
    fixed = ElmoModel(ElmoConfig.from_options(make_tiny_options(), scalar_mix_parameters=[0.0, 0.0, 1.0]))
    assert torch.equal(fixed.scalar_mixes[0].scalar_weights, torch.tensor([0.0, 0.0, 1.0]))
    assert not any(p.requires_grad for p in fixed.parameters())


def test_loading_never_reinitialises_loaded_weights(tmp_path):
    model = make_tiny_hf_model()
    with torch.no_grad():  # a trained-looking mix, so that a re-initialisation would show
        model.scalar_mixes[0].scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        model.scalar_mixes[0].gamma.fill_(3.0)
    model.save_pretrained(tmp_path)
    loaded = ElmoModel.from_pretrained(tmp_path)
    assert_same_state(loaded, model)
    # The <S>/</S> ids are non-persistent buffers, rebuilt after loading.
    assert torch.equal(loaded.bilm.bos_char_ids, model.bilm.bos_char_ids)
    assert torch.equal(loaded.bilm.eos_char_ids, model.bilm.eos_char_ids)
    # A second mix that the file lacks is initialised; the first one is not touched.
    more = ElmoModel.from_pretrained(tmp_path, num_output_representations=2)
    torch.testing.assert_close(more.scalar_mixes[0].scalar_weights, torch.tensor([0.5, -1.0, 2.0]), atol=0, rtol=0)
    assert torch.equal(more.scalar_mixes[1].scalar_weights, torch.zeros(3))
    assert torch.equal(more.scalar_mixes[1].gamma, torch.ones(1))
    assert_same_state(more.bilm, model.bilm)


# Frozen means frozen after loading too (transformers re-wraps parameters).
def test_loaded_biLM_stays_frozen_and_only_the_mix_trains(saved_model_dir, tiny_tokenizer):
    model = AutoModel.from_pretrained(saved_model_dir)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"scalar_mixes.0.scalar_weights", "scalar_mixes.0.gamma"}
    out = model(**batch(tiny_tokenizer), output_hidden_states=True)
    assert not any(h.requires_grad for h in out.hidden_states)
    with torch.no_grad():  # nothing keeps a graph under no_grad
        assert not model(**batch(tiny_tokenizer)).last_hidden_state.requires_grad


def test_core_folder_loads_with_auto_model_and_hf_folder_with_the_core(tmp_path, tiny_tokenizer):
    core = make_tiny_elmo(dropout=0.0)
    save_model_folder(core, tmp_path / "core")
    from_core = AutoModel.from_pretrained(tmp_path / "core", trust_remote_code=True)
    assert isinstance(from_core, ElmoModel)
    assert_same_state(from_core, core)
    char_ids, mask = words_to_char_ids(TOKENS)
    torch.testing.assert_close(
        from_core(**batch(tiny_tokenizer)).last_hidden_state, core(char_ids, mask).representations[0], atol=1e-6, rtol=0
    )
    from_core.save_pretrained(tmp_path / "hf")
    assert_same_state(load_model_folder(tmp_path / "hf"), core)


def test_task_model_folder_loads_with_the_core_and_as_a_base_model(tmp_path):
    base = make_tiny_hf_model()
    tagger = ElmoForTokenClassification(ElmoConfig.from_options(base.config.to_options(), num_labels=5))
    tagger.elmo.load_state_dict(base.state_dict())
    tagger.save_pretrained(tmp_path)
    assert set(load_file(tmp_path / "model.safetensors")) >= {"classifier.weight", "elmo.scalar_mixes.0.gamma"}
    assert_same_state(load_model_folder(tmp_path), base)
    assert_same_state(AutoModel.from_pretrained(tmp_path), base)
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path)
    assert isinstance(reloaded, ElmoForTokenClassification)
    assert_same_state(reloaded, tagger)


def test_save_load_save_elsewhere_load(tmp_path, tiny_hf_model, tiny_tokenizer):
    tiny_hf_model.save_pretrained(tmp_path / "a")
    first = AutoModel.from_pretrained(tmp_path / "a", trust_remote_code=True)
    first.save_pretrained(tmp_path / "b")
    second = AutoModel.from_pretrained(tmp_path / "b", trust_remote_code=True)
    assert_same_state(second, tiny_hf_model)
    names = lambda folder: sorted(p.name for p in folder.iterdir())  # noqa: E731
    assert names(tmp_path / "a") == names(tmp_path / "b")
    inputs = batch(tiny_tokenizer)
    torch.testing.assert_close(
        second(**inputs).last_hidden_state, tiny_hf_model(**inputs).last_hidden_state, atol=1e-6, rtol=0
    )


# Plain pickle, deepcopy and torch.save work.
def test_pickle_deepcopy_and_torch_save_round_trip(tiny_hf_model, tiny_tokenizer):
    inputs = batch(tiny_tokenizer, [["a", "b", "c"]])
    expected = tiny_hf_model(**inputs).last_hidden_state
    buffer = io.BytesIO()
    torch.save(tiny_hf_model, buffer)
    buffer.seek(0)
    clones = (
        pickle.loads(pickle.dumps(tiny_hf_model)),
        copy.deepcopy(tiny_hf_model),
        torch.load(buffer, weights_only=False),
    )
    for clone in clones:
        torch.testing.assert_close(clone(**inputs).last_hidden_state, expected, atol=1e-6, rtol=0)


def test_token_classification_without_labels_says_what_to_set():
    config = ElmoConfig.from_options(make_tiny_options())
    config.id2label = None  # transformers' num_labels is then None
    with pytest.raises(ValueError, match=r"needs labels: set config.id2label \(or num_labels\)"):
        ElmoForTokenClassification(config)


def test_token_classification_loss_ignores_minus_100_and_only_mix_and_head_train(tiny_tokenizer):
    torch.manual_seed(0)
    config = ElmoConfig.from_options(make_tiny_options(), num_labels=4, dropout=0.0)
    model = ElmoForTokenClassification(config)
    model.elmo.load_state_dict(make_tiny_hf_model().state_dict())
    inputs = batch(tiny_tokenizer)
    labels = torch.tensor([[1, 2, 3], [0, -100, -100], [2, -100, -100]])
    out = model(**inputs, labels=labels)
    assert out.logits.shape == (3, 3, 4)
    expected = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 4), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=0)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {
        "elmo.scalar_mixes.0.scalar_weights",
        "elmo.scalar_mixes.0.gamma",
        "classifier.weight",
        "classifier.bias",
    }
    bilm_before = {k: v.clone() for k, v in model.elmo.bilm.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.05)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    for name, value in model.elmo.bilm.state_dict().items():
        assert torch.equal(value, bilm_before[name]), name
    with pytest.raises(ValueError, match="labels must be"):
        model(**inputs, labels=labels[:, :2])


def test_trainer_run_on_wikigold_lowers_the_loss(tmp_path, tiny_tokenizer):
    if not WIKIGOLD.is_file():
        pytest.skip(missing_data("ner/wikigold/wikigold.conll.txt"))
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    sentences = read_conll(WIKIGOLD, limit=160)
    labels = sorted({tag for sentence in sentences for _, tag in sentence})
    label2id = {label: i for i, label in enumerate(labels)}
    config = ElmoConfig.from_options(
        make_tiny_options(), num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id
    )
    model = ElmoForTokenClassification(config)
    model.elmo.load_state_dict(make_tiny_hf_model().state_dict())
    features = []
    for sentence in sentences:
        enc = tiny_tokenizer([w for w, _ in sentence], is_split_into_words=True, truncation=True, max_length=24)
        features.append({**enc, "labels": [label2id[t] for _, t in sentence][:24]})
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=20,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=32,
        learning_rate=0.05,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=features,
        eval_dataset=features,
        data_collator=DataCollatorForTokenClassification(tiny_tokenizer),
    )
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert after < before - 0.1, (before, after)


def test_hidden_states_are_the_tensors_the_mix_reads_so_their_gradients_exist(tiny_hf_model, tiny_tokenizer):
    tiny_hf_model.bilm.requires_grad_(True)
    out = tiny_hf_model(**batch(tiny_tokenizer), output_hidden_states=True)
    for h in out.hidden_states:
        h.retain_grad()
    out.last_hidden_state.sum().backward()
    weights = torch.softmax(tiny_hf_model.scalar_mixes[0].scalar_weights.detach(), 0)
    mask = batch(tiny_tokenizer)["attention_mask"].bool()
    for k, h in enumerate(out.hidden_states):
        assert h.grad is not None, k
        # d(sum of gamma * sum_k w_k h_k)/d h_k = gamma * w_k at real positions, 0 at padding.
        torch.testing.assert_close(h.grad[mask], torch.full_like(h.grad[mask], float(weights[k])))
        assert not h.grad[~mask].any()


def test_frozen_biLM_hidden_states_carry_no_graph(tiny_hf_model, tiny_tokenizer):
    out = tiny_hf_model(**batch(tiny_tokenizer), output_hidden_states=True)
    assert all(not h.requires_grad and h.grad_fn is None for h in out.hidden_states)
    assert out.last_hidden_state.requires_grad  # the mix trains


def test_config_has_hidden_size_and_num_hidden_layers(tiny_hf_model):
    config = tiny_hf_model.config
    assert config.hidden_size == 2 * config.lstm["projection_dim"] == config.output_dim
    assert config.num_hidden_layers == config.lstm["n_layers"]
    out = tiny_hf_model(**batch(ElmoTokenizer.from_options(config.to_options())), output_hidden_states=True)
    assert out.last_hidden_state.shape[-1] == config.hidden_size
    assert len(out.hidden_states) == config.num_hidden_layers + 1


def test_output_attentions_is_refused_clearly(tiny_hf_model, tiny_tokenizer):
    with pytest.raises(ValueError, match="output_attentions=True cannot be honoured: ELMo is a biLSTM"):
        tiny_hf_model(**batch(tiny_tokenizer), output_attentions=True)
    tiny_hf_model.config.output_attentions = True
    with pytest.raises(ValueError, match="has no attention weights"):
        tiny_hf_model(**batch(tiny_tokenizer))


def test_input_embeddings_are_the_char_cnn_and_resizing_changes_nothing(tiny_hf_model, tiny_tokenizer):
    before = {k: v.clone() for k, v in tiny_hf_model.state_dict().items()}
    assert tiny_hf_model.get_input_embeddings() is tiny_hf_model.bilm.char_cnn
    assert tiny_tokenizer.add_tokens(["<ent>"]) == 1
    assert tiny_hf_model.resize_token_embeddings(len(tiny_tokenizer)) is tiny_hf_model.bilm.char_cnn
    for key, value in tiny_hf_model.state_dict().items():
        assert torch.equal(value, before[key]), key
    enc = tiny_tokenizer(["see <ent> here"], return_tensors="pt")
    assert tiny_hf_model(**enc).last_hidden_state.shape[1] == 3  # the added token reads as one word
    with pytest.raises(ValueError, match="pretrained char CNN"):
        tiny_hf_model.set_input_embeddings(torch.nn.Embedding(4, 8))


def test_task_model_input_embeddings_are_the_char_cnn_too():
    config = ElmoConfig.from_options(make_tiny_options(), num_labels=3)
    tagger = ElmoForTokenClassification(config)
    assert tagger.get_input_embeddings() is tagger.elmo.bilm.char_cnn
    assert tagger.resize_token_embeddings(10) is tagger.elmo.bilm.char_cnn


def test_layer_norm_mix_of_a_sentence_does_not_depend_on_its_batch_mates(tiny_tokenizer):
    model = make_tiny_hf_model(do_layer_norm=True)
    short, long = ["the", "bank"], ["a", "much", "longer", "batch", "mate", "with", "more", "words", "."]
    alone = model(**batch(tiny_tokenizer, [short])).last_hidden_state[0]
    together = model(**batch(tiny_tokenizer, [short, long])).last_hidden_state[0, :2]
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    original = make_tiny_hf_model(do_layer_norm=True, layer_norm_scope="batch")  # bilm-tf's statistics, opt-in
    alone = original(**batch(tiny_tokenizer, [short])).last_hidden_state[0]
    together = original(**batch(tiny_tokenizer, [short, long])).last_hidden_state[0, :2]
    assert (together - alone).abs().max() > 1e-2


# ----------------------------------------------- every folder save_pretrained writes, read by every face


def test_a_sharded_save_pretrained_folder_gives_every_face_the_unsharded_vectors(tmp_path):
    """R42: AutoModel...save_pretrained(d, max_shard_size="2MB") is read by the core, `elmo embed` and spaCy."""
    import h5py
    from typer.testing import CliRunner

    from elmo_core.apps.cli import app
    from elmo_core.files.model_folder import check_model_folder, default_model_dir

    source = default_model_dir()
    sharded = tmp_path / "sharded"
    AutoModel.from_pretrained(source).save_pretrained(sharded, max_shard_size="2MB")
    tagger = tmp_path / "tagger"
    AutoModelForTokenClassification.from_pretrained(source, num_labels=3).save_pretrained(
        tagger, max_shard_size="2MB", variant="fp32"
    )
    assert len(json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]) > 0
    assert len(list(sharded.glob("model-*-of-*.safetensors"))) > 2 and not (sharded / "model.safetensors").exists()
    assert (tagger / "model.safetensors.index.fp32.json").is_file()
    sentences = [["The", "river", "bank", "."], ["Ada", "Lovelace", "wrote", "notes", "."]]
    reference = embed_sentences(load_model_folder(source, dropout=0.0), sentences)  # [layers, tokens, dim] each
    for folder in (sharded, tagger):
        check_model_folder(folder)
        for got, expected in zip(embed_sentences(load_model_folder(folder, dropout=0.0), sentences), reference):
            torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(expected), rtol=0, atol=0)
    # from_pretrained, the fp32-variant tagger without naming its variant (as the core reads it).
    char_ids, mask = words_to_char_ids(sentences, 50)
    for auto, folder in ((AutoModel, sharded), (AutoModelForTokenClassification, tagger)):
        with torch.no_grad():
            out = auto.from_pretrained(folder)(char_ids=char_ids, attention_mask=mask, output_hidden_states=True)
        for k, expected in enumerate(reference):
            got = torch.stack(out.hidden_states)[:, k, : expected.shape[1]]
            torch.testing.assert_close(got, torch.from_numpy(expected), rtol=0, atol=1e-6)
    # The command line.
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["embed", str(text), str(tmp_path / "out.h5"), "--model", str(sharded), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "out.h5", "r") as f:
        for k, expected in enumerate(reference):
            torch.testing.assert_close(torch.from_numpy(f[str(k)][()]), torch.from_numpy(expected), rtol=0, atol=1e-6)
    # The spaCy component.
    spacy = pytest.importorskip("spacy")
    pytest.importorskip("spacy_elmo")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(sharded)}})
    doc = nlp(" ".join(sentences[1]))
    assert [t.text for t in doc] == sentences[1]
    # One Doc is a batch of one, the reference a batch of two: other product shapes, whose float
    # rounding differs by up to 2.4e-6 on an AMD EPYC (MKL's kernels there; 1e-6 held on the Xeon).
    torch.testing.assert_close(torch.from_numpy(doc._.elmo_layers), torch.from_numpy(reference[1]), rtol=0, atol=1e-5)


def test_a_missing_shard_is_one_clear_error_for_from_pretrained(tmp_path, tiny_hf_model):
    from elmo_core import WeightFileError

    tiny_hf_model.save_pretrained(tmp_path, max_shard_size="2KB")
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 2
    shards[1].unlink()
    with pytest.raises(
        WeightFileError, match=rf"names 1 shard file\(s\) the folder does not hold: \['{shards[1].name}'\]"
    ):
        ElmoModel.from_pretrained(tmp_path)


# ------------------------------------------------------------------ long rows: the core's windows


def windowed(model: ElmoModel, window_tokens: int = 64) -> ElmoModel:
    model.config.window_tokens = window_tokens
    return model


def long_words(num_tokens: int) -> list[str]:
    words = ["river", "bank", "Ada", ",", "notes", "the", "was", "steep"]
    return [words[(i * 7) % len(words)] + str(i % 3) for i in range(num_tokens)]


def long_batch(num_tokens: int, short: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    long = long_words(num_tokens)
    return words_to_char_ids([long, long[:short]], 50)


def test_a_long_row_trains_the_scalar_mix_and_a_trainable_bilm_through_every_window():
    """The mix reads the assembled windows: its gradient is the one over the core's windowed layers."""
    from elmo_core import ScalarMix

    model = windowed(make_tiny_hf_model())
    with torch.no_grad():
        model.scalar_mixes[0].scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
    char_ids, mask = long_batch(200)
    out = model(char_ids=char_ids, attention_mask=mask, output_hidden_states=True)
    out.last_hidden_state.square().sum().backward()
    # The reference: the core's own windows (embed_sentences), mixed by a fresh ScalarMix with the same weights.
    long = long_words(200)
    layers = embed_sentences(make_tiny_elmo(), [long, long[:5]], window_tokens=64)  # [3, tokens, 16] each
    for row, expected in enumerate(layers):
        n = expected.shape[1]
        for k in range(3):
            torch.testing.assert_close(
                out.hidden_states[k][row, :n].detach(), torch.from_numpy(expected[k]), atol=1e-5, rtol=0
            )
    reference = ScalarMix(3, initial_scalar_parameters=[0.5, -1.0, 2.0])
    mixed = [reference([torch.from_numpy(x[k])[None] for k in range(3)]) for x in layers]
    sum(m.square().sum() for m in mixed).backward()
    torch.testing.assert_close(
        model.scalar_mixes[0].scalar_weights.grad, reference.scalar_weights.grad, atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(model.scalar_mixes[0].gamma.grad, reference.gamma.grad, atol=1e-4, rtol=1e-4)
    # A trainable biLM gets gradients through the windows too (every LSTM layer and the char CNN).
    model.zero_grad()
    model.bilm.requires_grad_(True)
    model(char_ids=char_ids, attention_mask=mask).last_hidden_state.square().sum().backward()
    for name, parameter in model.bilm.named_parameters():
        if parameter.requires_grad:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_a_long_row_keeps_the_sentence_boundaries_of_its_first_and_last_window():
    plain = windowed(make_tiny_hf_model())
    bounded = windowed(make_tiny_hf_model(keep_sentence_boundaries=True))
    char_ids, mask = long_batch(200)
    with torch.no_grad():
        inner = plain(char_ids=char_ids, attention_mask=mask).last_hidden_state
        out = bounded(char_ids=char_ids, attention_mask=mask, output_hidden_states=True)
        first = bounded.bilm(char_ids[:1, :64]).activations  # the first window, read alone
        last = bounded.bilm(char_ids[:1, 200 - 64 :]).activations  # the last window
    assert out.last_hidden_state.shape == (2, 202, 16)
    torch.testing.assert_close(out.last_hidden_state[0, 1:201], inner[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.last_hidden_state[1, 1:6], inner[1, :5], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.hidden_states[2][0, 0], first[2, 0, 0], atol=1e-5, rtol=0)  # <S>
    torch.testing.assert_close(out.hidden_states[2][0, 201], last[2, 0, -1], atol=1e-5, rtol=0)  # </S>
    assert out.last_hidden_state[1, 7:].abs().max() == 0  # the short row's padding


def test_window_settings_are_saved_with_the_folder_and_checked(tmp_path):
    model = windowed(make_tiny_hf_model(), 300)
    model.config.window_context = 20
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["window_tokens"], config["window_context"]) == (300, 20)
    assert ElmoModel.from_pretrained(tmp_path).config.window_tokens == 300
    with pytest.raises(ValueError, match=r"window_context \(200\) must be less than half of window_tokens \(300\)"):
        ElmoConfig(window_tokens=300, window_context=200)


@pytest.mark.parametrize("device", DEVICES)
def test_a_long_row_is_windowed_on_the_models_device_from_inputs_on_the_cpu(device):
    model = windowed(make_tiny_hf_model())
    char_ids, mask = long_batch(150)
    with torch.no_grad():
        expected = model(char_ids=char_ids, attention_mask=mask).last_hidden_state
        got = model.to(device)(char_ids=char_ids, attention_mask=mask).last_hidden_state
    assert got.device.type == torch.device(device).type
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_from_pretrained_gives_float32_under_another_default_dtype(saved_model_dir, tiny_tokenizer, dtype):
    inputs = batch(tiny_tokenizer)
    reference = ElmoModel.from_pretrained(saved_model_dir).eval()(**inputs).last_hidden_state
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        models = [ElmoModel.from_pretrained(saved_model_dir), AutoModel.from_pretrained(saved_model_dir)]
        outputs = [model.eval()(**inputs).last_hidden_state for model in models]
        assert torch.get_default_dtype() == dtype
    finally:
        torch.set_default_dtype(before)
    for model, output in zip(models, outputs):
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        torch.testing.assert_close(output, reference, rtol=0, atol=1e-6)
    asked = ElmoModel.from_pretrained(saved_model_dir, dtype=torch.bfloat16)
    assert {p.dtype for p in asked.parameters()} == {torch.bfloat16}  # another precision when asked for


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16], ids=str)
def test_int32_and_int16_ids_give_the_int64_vectors_exactly(tiny_hf_model, tiny_tokenizer, dtype):
    b = tiny_tokenizer([["The", "river", "bank", "."], ["Hello", "!"]], is_split_into_words=True, padding=True)
    b = {k: torch.tensor(v) for k, v in b.items()}
    want = tiny_hf_model(char_ids=b["char_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    as_char_ids = tiny_hf_model(char_ids=b["char_ids"].to(dtype), attention_mask=b["attention_mask"].to(dtype))
    as_input_ids = tiny_hf_model(input_ids=b["char_ids"].to(dtype), attention_mask=b["attention_mask"])
    assert torch.equal(as_char_ids.last_hidden_state, want) and torch.equal(as_input_ids.last_hidden_state, want)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.float16], ids=str)
def test_ids_in_a_dtype_that_cannot_hold_them_are_refused_before_the_forward(tiny_hf_model, tiny_tokenizer, dtype):
    b = batch(tiny_tokenizer)
    with pytest.raises(TypeError, match=rf"char_ids .*{dtype}"):
        tiny_hf_model(char_ids=b["char_ids"].to(dtype), attention_mask=b["attention_mask"])
