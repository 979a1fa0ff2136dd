"""learnerd: a continuous-learning daemon for LLM assistants."""

__version__ = "0.1.0"
