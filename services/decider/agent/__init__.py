"""The LLM agent: an `Advisor` for the decider that reads a bounded observation and acts through guarded tools."""
