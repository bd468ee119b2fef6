"""rstar2: agentic reinforcement learning of language models with a code tool.

A re-implementation of the training system behind rStar2-Agent (arXiv 2508.20722): an async
graph of actors (rollout, tool executor, reward, learner, scheduler) connected by ZeroMQ.
"""

__version__ = "0.1.0"
