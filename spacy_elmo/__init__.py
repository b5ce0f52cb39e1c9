"""spacy_elmo: ELMo for spaCy v3 (the `elmo` component arrives with its own issue).

For now it provides the raw-text tokenizer that `elmo embed --tokenize` uses.
"""
