"""A local language model served through an Ollama-compatible adapter in front of llama-server."""
