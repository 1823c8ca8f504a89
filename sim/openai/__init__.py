"""A stand-in OpenAI-compatible streaming server with configurable speed, for the serving benchmark."""

from sim.openai.server import StandInConfig, create_app, serve

__all__ = ["StandInConfig", "create_app", "serve"]
