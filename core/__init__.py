"""elmo_core: the ELMo biLM (Peters et al., NAACL 2018) in plain PyTorch.

The public API, shared by `spacy_elmo` and `hf_elmo`. It imports neither spaCy nor
transformers. The rest lives in the layers below: `model`, `runtime`, `files`, `apps`.

    from elmo_core import Elmo, embed_sentences, load_bilm_tf, read_options
    elmo = Elmo(read_options("options.json"), dropout=0.0)
    load_bilm_tf(elmo, "weights.hdf5")
    vectors = embed_sentences(elmo, [["Hello", "world", "."]], layers="all")  # [3, 3, 1024] per sentence
"""

from __future__ import annotations

if __name__ != "elmo_core":  # pragma: no cover - packaging guard
    raise ImportError(
        f"this package must be imported as 'elmo_core', not {__name__!r}. Install the project "
        "(pip install -e .), which maps the folder core/ to elmo_core, and import elmo_core."
    )

from ._version import __version__ as __version__
from .apps.training.perplexity import perplexity
from .files.model_folder import default_model_dir, load_elmo, load_model_folder, save_model_folder
from .files.options_file import read_options
from .files.weights import load_bilm_tf, save_bilm_tf
from .model.bilm import BiLM, BiLMOutput
from .model.characters import words_to_char_ids
from .model.elmo import Elmo, ElmoOutput, ScalarMix
from .model.errors import ElmoError, OptionsError, WeightFileError
from .model.options import PUBLISHED_OPTIONS, BiLMOptions
from .runtime.embedding import EmbedSettings, embed_sentences, iter_embeddings
from .runtime.feature_cache import FeatureCache
from .runtime.memory import release_free_memory
from .runtime.quantization import quantize_int8
from .runtime.threads import set_thread_policy

__all__ = [
    # loading and saving
    "load_elmo",
    "default_model_dir",
    "load_model_folder",
    "save_model_folder",
    "read_options",
    "load_bilm_tf",
    "save_bilm_tf",
    # embedding
    "embed_sentences",
    "iter_embeddings",
    "EmbedSettings",
    "words_to_char_ids",
    "perplexity",
    # the model
    "Elmo",
    "ElmoOutput",
    "BiLM",
    "BiLMOutput",
    "ScalarMix",
    "BiLMOptions",
    "PUBLISHED_OPTIONS",
    # errors
    "ElmoError",
    "OptionsError",
    "WeightFileError",
    # tools
    "FeatureCache",
    "quantize_int8",
    "release_free_memory",
    "set_thread_policy",
]
