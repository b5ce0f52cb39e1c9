"""transformers common-test runner (not collected: see run_transformers_common_tests.py)."""
