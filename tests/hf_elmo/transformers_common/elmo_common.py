"""transformers' own common model and config tests, run against ElmoModel and ElmoForTokenClassification.

Not collected by the default suite (the file is not named test_*.py, and it imports
transformers' test files, which ship only in transformers' source distribution).
`run_transformers_common_tests.py` copies it beside those files and runs it; see there.
"""

from __future__ import annotations

import unittest

import torch

from hf_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel

from .test_configuration_common import ConfigTester
from .test_modeling_common import ModelTesterMixin

TINY_LSTM = {
    "dim": 32,
    "projection_dim": 8,
    "n_layers": 2,
    "cell_clip": 3.0,
    "proj_clip": 3.0,
    "use_skip_connections": True,
}
TINY_CHAR_CNN = {
    "embedding": {"dim": 4},
    "filters": [[1, 4], [2, 8]],
    "n_highway": 1,
    "n_characters": 262,
    "max_characters_per_token": 50,
    "activation": "relu",
}

# Tests that cannot apply to ELMo, each with the reason. Everything else runs.
SKIPS: dict[str, str] = {
    "test_attention_outputs": "ELMo is a biLSTM: no attention (output_attentions=True is refused with a ValueError)",
    "test_retain_grad_hidden_states_attentions": "needs attentions; hidden_states gradients are tested in "
    "tests/hf_elmo/test_modeling_elmo.py",
    "test_resize_tokens_embeddings": "no word embedding matrix: resize_token_embeddings is a documented no-op "
    "returning the char CNN (characters need no resizing)",
    "test_resize_embeddings_untied": "no word embedding matrix (see test_resize_tokens_embeddings)",
    "test_model_get_set_embeddings": "get_input_embeddings is the pretrained char CNN, not an nn.Embedding; "
    "set_input_embeddings refuses with a ValueError",
    "test_inputs_embeds": "ELMo reads character ids; there is no inputs_embeds path",
    "test_inputs_embeds_matches_input_ids": "ELMo reads character ids; there is no inputs_embeds path",
    "test_torch_export": "torch.export of the data-dependent LSTM loop (rows still running) is not supported",
    "test_torch_compile_for_training": "not a goal; the recurrence has its own compile_recurrence",
    "test_gradient_checkpointing_backward_compatibility": "no gradient checkpointing (a 2-layer biLSTM)",
    "test_training_gradient_checkpointing": "no gradient checkpointing (a 2-layer biLSTM)",
    "test_training_gradient_checkpointing_use_reentrant": "no gradient checkpointing",
    "test_training_gradient_checkpointing_use_reentrant_false": "no gradient checkpointing",
    "test_training_gradient_checkpointing_use_reentrant_true": "no gradient checkpointing",
}


class ElmoModelTester:
    """Tiny configs and char-id inputs [13, 7, 50] for the common tests."""

    def __init__(self, parent, batch_size: int = 13, seq_length: int = 7, num_labels: int = 3) -> None:
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.num_labels = num_labels
        self.is_training = True
        self.hidden_size = 2 * TINY_LSTM["projection_dim"]
        self.num_hidden_layers = TINY_LSTM["n_layers"]
        self.num_attention_heads = 0  # read by a few generic tests only when attentions exist

    def get_config(self) -> ElmoConfig:
        return ElmoConfig(lstm=dict(TINY_LSTM), char_cnn=dict(TINY_CHAR_CNN), dropout=0.0, num_labels=self.num_labels)

    def prepare_config_and_inputs(self):
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(1, self.seq_length + 1, (self.batch_size,), generator=generator)
        lengths[0] = self.seq_length  # the longest row fills the batch
        mask = torch.arange(self.seq_length)[None, :] < lengths[:, None]  # right padding
        char_ids = torch.randint(1, 262, (self.batch_size, self.seq_length, 50), generator=generator)
        char_ids = char_ids * mask[..., None]
        labels = torch.randint(0, self.num_labels, (self.batch_size, self.seq_length), generator=generator)
        return self.get_config(), char_ids, mask.long(), labels

    def prepare_config_and_inputs_for_common(self):
        config, char_ids, mask, _ = self.prepare_config_and_inputs()
        return config, {"input_ids": char_ids, "attention_mask": mask}


class ElmoModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (ElmoModel, ElmoForTokenClassification)
    has_attentions = False
    test_resize_embeddings = False
    test_torch_exportable = False

    def setUp(self) -> None:
        self.model_tester = ElmoModelTester(self)
        # has_text_modality=False: the text-model property it adds is `vocab_size`, and ELMo
        # has no word vocabulary (it reads characters; the tokenizer's ids are pad/unk/added).
        self.config_tester = ConfigTester(
            self,
            config_class=ElmoConfig,
            common_properties=["hidden_size", "num_hidden_layers"],
            has_text_modality=False,
            lstm=dict(TINY_LSTM),
            char_cnn=dict(TINY_CHAR_CNN),
        )

    def test_config(self) -> None:
        self.config_tester.run_common_tests()

    def test_training(self) -> None:
        # transformers skips base models (no loss) by looking them up in its own table of
        # built-in models, where ElmoModel is not; only the task model has a loss to train.
        self.all_model_classes = (ElmoForTokenClassification,)
        super().test_training()

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is ElmoForTokenClassification:
            inputs_dict["labels"] = torch.zeros(
                self.model_tester.batch_size, self.model_tester.seq_length, dtype=torch.long
            )
        return inputs_dict


for _name, _reason in SKIPS.items():
    if hasattr(ElmoModelTest, _name):
        setattr(ElmoModelTest, _name, unittest.skip(_reason)(getattr(ElmoModelTest, _name)))
