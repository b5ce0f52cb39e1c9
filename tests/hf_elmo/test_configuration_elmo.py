from __future__ import annotations

import json
import logging

import pytest
from transformers import (
    AutoConfig,
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
)

from elmo_core import BiLMOptions, OptionsError
from elmo_core.files.model_folder import ELMO_SETTINGS, read_model_config
from hf_elmo import ElmoConfig

from ..conftest import make_tiny_options


def test_config_bridges_to_and_from_options():
    options = make_tiny_options()
    config = ElmoConfig.from_options(options, num_output_representations=2, dropout=0.1)
    assert config.to_options() == options
    assert config.lstm == options.to_dict()["lstm"] and config.char_cnn == options.to_dict()["char_cnn"]
    assert config.elmo_settings() == {**ELMO_SETTINGS, "num_output_representations": 2, "dropout": 0.1}
    assert config.output_dim == 16 and config.num_hidden_layers == 2 and not hasattr(config, "n_outputs")


def test_default_config_is_the_original_model():
    assert ElmoConfig().to_options() == BiLMOptions()


def test_config_json_is_the_model_folder_format(tmp_path):
    options = make_tiny_options()
    ElmoConfig.from_options(options, keep_sentence_boundaries=True).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_type"] == "elmo"
    assert data["lstm"] == options.to_dict()["lstm"] and data["char_cnn"] == options.to_dict()["char_cnn"]
    assert data["auto_map"] == {"AutoConfig": "configuration_elmo.ElmoConfig"}
    read_options, settings = read_model_config(tmp_path)  # the core reads what transformers wrote
    assert read_options == options and settings["keep_sentence_boundaries"] is True


def test_config_round_trips_with_transformers_and_unknown_keys(tmp_path):
    config = ElmoConfig.from_options(
        make_tiny_options(),
        stateful=True,
        scalar_mix_parameters=[0.0, 1.0, 2.0],
        architectures=["ElmoModel"],
        num_labels=3,
        some_future_key={"a": 1},
    )
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, ElmoConfig)
    assert loaded.to_options() == config.to_options()
    assert loaded.elmo_settings() == config.elmo_settings()
    assert loaded.num_labels == 3 and loaded.some_future_key == {"a": 1}
    assert loaded.architectures == ["ElmoModel"]


def test_training_files_n_characters_261_is_read_as_262():
    data = make_tiny_options().to_dict()
    data["char_cnn"]["n_characters"] = 261
    assert ElmoConfig(**data).char_cnn["n_characters"] == 262


def test_invalid_options_raise_a_clear_error():
    data = make_tiny_options().to_dict()
    del data["lstm"]["dim"]
    with pytest.raises(OptionsError, match="missing the key 'dim'"):
        ElmoConfig(**data)
    data = make_tiny_options().to_dict()
    data["lstm"]["projection_dim"] = -1
    with pytest.raises(OptionsError, match="lstm.projection_dim must be a positive integer"):
        ElmoConfig(**data)


def test_pad_token_id_agrees_with_the_tokenizer_so_trainer_is_quiet(tmp_path, saved_model_dir, caplog):
    config = AutoConfig.from_pretrained(saved_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(saved_model_dir)
    assert config.pad_token_id == tokenizer.pad_token_id == 0
    tagger = AutoModelForTokenClassification.from_pretrained(saved_model_dir, num_labels=2)
    features = [{**tokenizer(w, is_split_into_words=True), "labels": [0] * len(w)} for w in (["a", "b"], ["c"])]
    args = TrainingArguments(str(tmp_path / "run"), max_steps=1, report_to=[], save_strategy="no", use_cpu=True)
    collate = DataCollatorForTokenClassification(tokenizer)
    trainer = Trainer(tagger, args, train_dataset=features, data_collator=collate, processing_class=tokenizer)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert [r.getMessage() for r in caplog.records if "PAD/BOS/EOS" in r.getMessage()] == []
    assert tagger.config.pad_token_id == 0
