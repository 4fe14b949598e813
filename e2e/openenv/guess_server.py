"""The environment served by OpenEnv's own ``create_app`` (its ``/ws`` sessions), for uvicorn."""

from guess_env import GuessAction, GuessEnvironment, GuessObservation
from openenv.core.env_server.http_server import create_app

app = create_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=4)
