"""Faithful stand-ins for what cannot run here: vast.ai, Ollama, the job system's world; and local servers."""
