"""hf_elmo: ELMo as a Hugging Face transformers model (arrives with its own issue)."""
