"""Agent evaluation suite: scenarios as data, a pure scorer, a runner against any Ollama host."""
