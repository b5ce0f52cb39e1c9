"""transformers' own common model and config tests, run against ElmoModel and its task models.

Not collected by the default suite (the file is not named test_*.py, and it imports
transformers' test files, which ship only in transformers' source distribution).
`run_transformers_common_tests.py` copies it beside those files and runs it; see there.
The tests that do not run, and why, are listed in `skips.py`.
"""

from __future__ import annotations

import unittest

import torch

from hf_elmo import ElmoConfig, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel

from .skips import SKIPS
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
    all_model_classes = (ElmoModel, ElmoForTokenClassification, ElmoForSequenceClassification)
    has_attentions = False
    test_resize_embeddings = False
    test_torch_exportable = False
    # transformers runs this check only for models whose config file carries a copyright
    # year from 2023 on; it applies to ELMo as much (every weight set by _init_weights).
    test_can_init_all_missing_weights_before_2023 = True

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
        # built-in models, where ElmoModel is not; only the task models have a loss to train.
        self.all_model_classes = (ElmoForTokenClassification, ElmoForSequenceClassification)
        super().test_training()

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is ElmoForTokenClassification:
            inputs_dict["labels"] = torch.zeros(
                self.model_tester.batch_size, self.model_tester.seq_length, dtype=torch.long
            )
        if return_labels and model_class is ElmoForSequenceClassification:
            inputs_dict["labels"] = torch.zeros(self.model_tester.batch_size, dtype=torch.long)
        return inputs_dict


for _name, _reason in SKIPS.items():
    if hasattr(ElmoModelTest, _name):
        setattr(ElmoModelTest, _name, unittest.skip(_reason)(getattr(ElmoModelTest, _name)))
