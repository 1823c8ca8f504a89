"""A protocol-level Ollama stand-in: /api/chat (streaming or not), /api/tags, /api/show, scripted behaviours."""
