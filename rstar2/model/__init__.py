"""Models and tokenizers: the embedded default (built locally) and any local HF checkpoint."""
