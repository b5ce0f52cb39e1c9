from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForTokenClassification

from elmo_core import ElmoError, words_to_char_ids
from elmo_core.files.model_folder import tokenizer_settings
from hf_elmo import ElmoBatchEncoding, ElmoTokenizer
from hf_elmo.encoding_elmo import WORD_ID_BASE, word_id

from ..conftest import make_tiny_options
from .conftest import TOKENS


def test_token_lists_become_the_cores_character_ids(tiny_tokenizer):
    enc = tiny_tokenizer(TOKENS, is_split_into_words=True, padding=True, return_tensors="pt")
    char_ids, mask = words_to_char_ids(TOKENS)
    assert isinstance(enc, ElmoBatchEncoding)
    assert enc["char_ids"].dtype == torch.int64 and enc["char_ids"].shape == (3, 3, 50)
    assert torch.equal(enc["char_ids"], char_ids)
    assert torch.equal(enc["attention_mask"], mask.long())
    # One id per token: each word's fixed id (no word vocabulary), 0 for padding.
    expected = [[word_id(w) for w in s] + [0] * (3 - len(s)) for s in TOKENS]
    assert enc["input_ids"].tolist() == expected and bool((enc["input_ids"][mask] >= WORD_ID_BASE).all())
    assert set(enc) == {"input_ids", "char_ids", "attention_mask"}


def test_word_ids_give_one_id_per_position_and_none_for_padding(tiny_tokenizer):
    enc = tiny_tokenizer(TOKENS, is_split_into_words=True, padding="max_length", max_length=4)
    assert enc.word_ids(0) == [0, 1, 2, None]
    assert enc.word_ids(1) == [0, 1, None, None]
    assert enc.word_ids(2) == [0, None, None, None]
    assert enc.tokens(1) == ["naïve", "😀", "<pad>", "<pad>"]


def test_raw_text_is_split_with_spacy_english_rules(tiny_tokenizer):
    spacy_elmo = pytest.importorskip("spacy_elmo.tokenization")
    split = spacy_elmo.english_tokenizer()
    texts = ["Don't stop-me now!!", "The river bank."]
    enc = tiny_tokenizer(texts, padding=True, return_tensors="pt")
    expected = [split(t) for t in texts]
    assert expected[0][:2] == ["Do", "n't"]
    assert [enc.tokens(k)[: len(s)] for k, s in enumerate(expected)] == expected
    assert torch.equal(enc["char_ids"], words_to_char_ids(expected)[0])
    # Padding is to the longest sentence of the call, no more.
    assert enc["input_ids"].shape[1] == max(len(s) for s in expected)
    assert tiny_tokenizer.tokenize("Don't stop-me now!!") == expected[0]


SURROGATE_TEXTS = ["bad \ud800 surrogate here", "a\udc00b word\ud83d. end", "\udfff"]
SURROGATE_WORDS = [["bad", "\ud800", "surrogate", "here"], ["a\udc00b", "word\ud83d", ".", "end"], ["\udfff"]]


def test_raw_text_with_lone_surrogates_gives_the_tokens_and_vectors_of_its_pre_split_words(
    tiny_tokenizer, tiny_hf_model
):
    # A lone surrogate used to stop raw text with a UnicodeEncodeError from spaCy's internals.
    spacy_elmo = pytest.importorskip("spacy_elmo.tokenization")
    from transformers import pipeline

    from elmo_core.files.tokenizers import get_tokenizer

    assert [get_tokenizer()(text) for text in SURROGATE_TEXTS] == SURROGATE_WORDS
    assert spacy_elmo.english_sentences()(" ".join(SURROGATE_TEXTS)) == [
        ["bad", "\ud800", "surrogate", "here", "a\udc00b", "word\ud83d", "."],
        ["end", "\udfff"],
    ]
    assert [tiny_tokenizer.tokenize(text) for text in SURROGATE_TEXTS] == SURROGATE_WORDS
    raw = tiny_tokenizer(SURROGATE_TEXTS, padding=True, return_tensors="pt", return_offsets_mapping=True)
    split = tiny_tokenizer(SURROGATE_WORDS, is_split_into_words=True, padding=True, return_tensors="pt")
    assert raw.tokens(0) == SURROGATE_WORDS[0]
    assert raw["offset_mapping"][0].tolist() == [[0, 3], [4, 5], [6, 15], [16, 20]]
    assert torch.equal(raw["char_ids"], split["char_ids"])
    # The surrogate is dropped from its token: a token that was only a surrogate reads as "".
    assert torch.equal(raw["char_ids"][0, 1], words_to_char_ids([[""]])[0][0, 0])
    with torch.no_grad():
        vectors = tiny_hf_model(char_ids=raw["char_ids"], attention_mask=raw["attention_mask"]).last_hidden_state
        expected = tiny_hf_model(**{k: split[k] for k in ("char_ids", "attention_mask")}).last_hidden_state
    torch.testing.assert_close(vectors, expected, atol=0, rtol=0)
    extractor = pipeline("elmo-feature-extraction", model=tiny_hf_model, tokenizer=tiny_tokenizer)
    got = np.asarray(extractor(SURROGATE_TEXTS[0]))[0]
    np.testing.assert_allclose(got, expected[0, :4].numpy(), atol=1e-6, rtol=0)


def test_single_inputs_have_no_batch_axis_unless_tensors_are_asked_for(tiny_tokenizer):
    enc = tiny_tokenizer(["a", "bc"], is_split_into_words=True)
    assert np.array(enc["char_ids"]).shape == (2, 50) and enc["attention_mask"] == [1, 1]
    assert enc["input_ids"] == [word_id("a"), word_id("bc")]
    assert tiny_tokenizer(["a", "bc"], is_split_into_words=True, return_tensors="pt")["char_ids"].shape == (1, 2, 50)
    assert tiny_tokenizer([["a"]], is_split_into_words=True, return_tensors="np")["char_ids"].shape == (1, 1, 50)


def test_truncation_keeps_the_first_tokens(tiny_tokenizer):
    enc = tiny_tokenizer(
        TOKENS, is_split_into_words=True, truncation=True, max_length=2, padding=True, return_tensors="pt"
    )
    assert enc["char_ids"].shape == (3, 2, 50) and enc["input_ids"].shape == (3, 2)
    assert torch.equal(enc["char_ids"], words_to_char_ids([s[:2] for s in TOKENS])[0])


def test_empty_sentences_pad_to_zero_rows(tiny_tokenizer):
    enc = tiny_tokenizer([[], ["a"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert enc["char_ids"].shape == (2, 1, 50) and enc["attention_mask"].tolist() == [[0], [1]]
    assert tiny_tokenizer([[], []], is_split_into_words=True, padding=True, return_tensors="pt")["char_ids"].shape == (
        2,
        0,
        50,
    )


def test_unusable_inputs_raise_clear_errors(tiny_tokenizer):
    with pytest.raises(ValueError, match="different lengths .* pass padding=True"):
        tiny_tokenizer(TOKENS, is_split_into_words=True, return_tensors="pt")
    with pytest.raises(TypeError, match="pass is_split_into_words=True"):
        tiny_tokenizer(TOKENS)
    with pytest.raises(ValueError, match="sentence pairs are not supported"):
        tiny_tokenizer("a b", "c d")
    with pytest.raises(ValueError, match="pads on the right only"):
        tiny_tokenizer(TOKENS, is_split_into_words=True, padding=True, padding_side="left")
    with pytest.raises(ValueError, match="bilm-tf's character ids"):
        ElmoTokenizer(padding_character=0)


def test_decode_gives_the_words_back_from_char_ids(tiny_tokenizer):
    enc = tiny_tokenizer(TOKENS, is_split_into_words=True, padding=True, return_tensors="pt")
    assert tiny_tokenizer.decode(enc["char_ids"][1]) == "naïve 😀"
    assert tiny_tokenizer.decode(enc["char_ids"][1, 0]) == "naïve"  # one word's row
    assert tiny_tokenizer.batch_decode(enc["char_ids"]) == [" ".join(s) for s in TOKENS]
    empty_row = tiny_tokenizer([[], ["a"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert tiny_tokenizer.batch_decode(empty_row["char_ids"]) == ["", "a"]


def test_decode_batch_decode_and_convert_ids_to_tokens_give_the_tokens_back_from_input_ids(tiny_tokenizer):
    enc = tiny_tokenizer(TOKENS, is_split_into_words=True, padding=True, return_tensors="pt")
    assert tiny_tokenizer.decode(enc["input_ids"][0]) == "Hello world ."
    assert tiny_tokenizer.decode(enc["input_ids"][1]) == "naïve 😀 <pad>"  # as transformers: padding shows
    assert tiny_tokenizer.decode(enc["input_ids"][1], skip_special_tokens=True) == "naïve 😀"
    rows = tiny_tokenizer.batch_decode(enc["input_ids"], skip_special_tokens=True)
    assert rows == [" ".join(s) for s in TOKENS]  # one string per row
    assert tiny_tokenizer.decode(enc["input_ids"], skip_special_tokens=True) == rows  # transformers 5: a batch
    assert tiny_tokenizer.convert_ids_to_tokens(enc["input_ids"][1].tolist()) == ["naïve", "😀", "<pad>"]
    assert tiny_tokenizer.convert_ids_to_tokens(int(enc["input_ids"][0, 1])) == "world"
    text = tiny_tokenizer.decode(enc["input_ids"][0], clean_up_tokenization_spaces=True)
    assert text == "Hello world."  # transformers' clean-up of " ." when asked


def test_word_ids_are_fixed_by_the_string_in_every_tokenizer_and_saved_folder(tmp_path, tiny_tokenizer):
    first = tiny_tokenizer(TOKENS, is_split_into_words=True, padding=True)["input_ids"]
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    again = ElmoTokenizer.from_options(make_tiny_options())
    for other in (loaded, again):
        assert other(TOKENS, is_split_into_words=True, padding=True)["input_ids"] == first
    assert len({word_id(w) for w in ("bank", "Bank", "bank.", "banks")}) == 4


def test_an_id_the_tokenizer_did_not_encode_is_refused_naming_char_ids(tiny_tokenizer):
    fresh = ElmoTokenizer.from_options(make_tiny_options())
    with pytest.raises(ValueError, match=r"decode the char_ids of the same encoding"):
        fresh.decode([word_id("never-encoded-here")])
    small = ElmoTokenizer.from_options(make_tiny_options())
    small._recent.size = 2  # remembers the last two distinct words only
    ids = small(["a", "b", "c"], is_split_into_words=True)["input_ids"]
    assert small.decode(ids[1:]) == "b c"
    with pytest.raises(ValueError, match="not among the last 2 distinct words"):
        small.convert_ids_to_tokens(ids[0])
    assert pickle.loads(pickle.dumps(small))._recent.get(ids[2]) is None  # a copy starts empty


def test_collator_pads_char_ids_and_labels(tiny_tokenizer):
    features = []
    for sentence in TOKENS:
        enc = tiny_tokenizer(sentence, is_split_into_words=True)
        features.append({**enc, "labels": list(range(len(sentence)))})
    padded = DataCollatorForTokenClassification(tiny_tokenizer)(features)
    assert torch.equal(padded["char_ids"], words_to_char_ids(TOKENS)[0])
    assert torch.equal(padded["input_ids"].ne(0).long(), padded["attention_mask"])
    assert padded["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    assert padded["labels"].tolist() == [[0, 1, 2], [0, 1, -100], [0, -100, -100]]


# A folder holding only the tokenizer loads through AutoTokenizer.
def test_tokenizer_only_folder_loads_through_auto_tokenizer(tmp_path, tiny_tokenizer):
    tiny_tokenizer.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "ElmoTokenizer"
    assert saved["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    settings = tokenizer_settings(make_tiny_options())
    assert {k: saved[k] for k in settings} == settings  # the core's settings, verbatim
    loaded = AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(loaded).__name__ == "ElmoTokenizer"
    words = [["Hello", "world"], ["naïve", "😀"]]
    first = tiny_tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]
    assert torch.equal(loaded(words, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"], first)
    for key in settings:
        assert getattr(loaded, key) == settings[key], key
    assert loaded.pad_token_id == 0


def test_tokenizer_pickles_after_loading_spacy(tiny_tokenizer):
    pytest.importorskip("spacy")
    tiny_tokenizer("warm up the text tokenizer")
    clone = pickle.loads(pickle.dumps(tiny_tokenizer))
    assert clone("a b.")["input_ids"] == tiny_tokenizer("a b.")["input_ids"]
    enc = tiny_tokenizer(["a b"], return_tensors="pt")
    assert pickle.loads(pickle.dumps(enc)).word_ids(0) == [0, 1]


def test_added_tokens_stay_whole_and_every_count_agrees(tiny_tokenizer):
    pytest.importorskip("spacy")
    assert len(tiny_tokenizer) == 2 and tiny_tokenizer.convert_ids_to_tokens([0, 1]) == ["<pad>", "<unk>"]
    assert tiny_tokenizer.add_tokens(["<ent>"]) == 1
    assert tiny_tokenizer.add_tokens(["<ent>"]) == 0  # already there
    assert len(tiny_tokenizer) == 3
    assert tiny_tokenizer.get_added_vocab()["<ent>"] == 2 == tiny_tokenizer.convert_tokens_to_ids("<ent>")
    assert tiny_tokenizer.convert_ids_to_tokens(2) == "<ent>"
    text = "see <ent> here, and<ent>there"
    assert tiny_tokenizer.tokenize(text) == ["see", "<ent>", "here", ",", "and", "<ent>", "there"]
    enc = tiny_tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert enc["input_ids"] == [word_id("see"), 2, word_id("here"), word_id(","), word_id("and"), 2, word_id("there")]
    assert tiny_tokenizer.convert_ids_to_tokens(enc["input_ids"])[1] == "<ent>"
    assert [text[a:b] for a, b in enc["offset_mapping"]] == enc.tokens()
    assert enc["char_ids"][1] == list(words_to_char_ids([["<ent>"]])[0][0, 0].tolist())
    assert enc["special_tokens_mask"] == [0] * 7
    assert tiny_tokenizer.add_special_tokens({"additional_special_tokens": ["[SEP]"]}) == 1
    assert len(tiny_tokenizer) == 4 and tiny_tokenizer.get_added_vocab()["[SEP]"] == 3
    enc = tiny_tokenizer("a [SEP] b", return_special_tokens_mask=True)
    assert (
        enc.tokens() == ["a", "[SEP]", "b"]
        and enc["input_ids"] == [word_id("a"), 3, word_id("b")]
        and enc["special_tokens_mask"] == [0, 1, 0]
    )


def test_added_tokens_survive_save_and_load(tmp_path, tiny_tokenizer):
    pytest.importorskip("spacy")
    tiny_tokenizer.add_tokens(["<ent>"])
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    assert len(loaded) == 3 and loaded.get_added_vocab()["<ent>"] == 2
    assert loaded.tokenize("see <ent> here") == ["see", "<ent>", "here"]


def test_offsets_point_at_each_tokens_characters(tiny_tokenizer):
    pytest.importorskip("spacy")
    texts = ["  Don't   stop-me\tnow!! ", "naïve café 😀", ""]
    enc = tiny_tokenizer(texts, padding=True, return_offsets_mapping=True, return_tensors="pt")
    assert enc["offset_mapping"].shape == (3, enc["input_ids"].shape[1], 2)
    for k, text in enumerate(texts):
        n = int(enc["attention_mask"][k].sum())
        spans = [text[a:b] for a, b in enc["offset_mapping"][k, :n].tolist()]
        assert spans == enc.tokens(k)[:n] == tiny_tokenizer.tokenize(text)
        assert enc["offset_mapping"][k, n:].eq(0).all()
    words = tiny_tokenizer(["ab", "c"], is_split_into_words=True, return_offsets_mapping=True)
    assert words["offset_mapping"] == [(0, 2), (0, 1)]  # within each word, as fast tokenizers give


def test_overflowing_tokens_are_refused_with_the_reason(tiny_tokenizer):
    with pytest.raises(ValueError, match="reads a sentence of any length whole"):
        tiny_tokenizer(["a", "b"], is_split_into_words=True, return_overflowing_tokens=True)


# ---------------------------------------------------------------- raw text keeps nothing per word
def new_words_texts(n_texts: int, seed: int = 0) -> list[str]:
    """Texts of 40 random lowercase words each, nearly all new to any vocabulary."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return [" ".join("".join(rng.choice(letters, 9)) for _ in range(40)) + " ." for _ in range(n_texts)]


@pytest.fixture
def spacy_vocabularies(monkeypatch) -> list:
    """Every spaCy pipeline `spacy.blank` builds during the test (the raw-text splitters' own)."""
    import spacy

    built = []
    blank = spacy.blank

    def recording_blank(*args, **kwargs):
        built.append(blank(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(spacy, "blank", recording_blank)
    return built


@pytest.mark.parametrize("plugins", [True, False], ids=["plug-in", "saved-folder-fallback"])
def test_tokenising_raw_text_keeps_no_string_per_new_word(spacy_vocabularies, monkeypatch, plugins):
    # A long-running service sees new words without end: ids, URLs, typos.
    import hf_elmo.tokenization_elmo as tokenization

    if not plugins:  # a saved folder's code where elmo-bilm is not installed builds spaCy itself

        def not_installed(name: str):
            raise ElmoError("no plug-in")

        monkeypatch.setattr(tokenization, "get_tokenizer", not_installed)
    tokenizer = ElmoTokenizer.from_options(make_tiny_options())
    warm_up, texts = new_words_texts(5, seed=1), new_words_texts(50)
    for text in warm_up:
        tokenizer(text)
    held = [len(nlp.vocab.strings) for nlp in spacy_vocabularies]
    encodings = [tokenizer(text, return_offsets_mapping=True) for text in texts]
    assert spacy_vocabularies and [len(nlp.vocab.strings) for nlp in spacy_vocabularies] == held  # 2,000 new words
    # The tokens are still the words, with their spans.
    assert tokenizer.tokenize(texts[0]) == texts[0].split()
    assert encodings[0]["offset_mapping"][1] == (10, 19)
