"""The rdagent stack's adapter to RD-Agent 1.0.0's RL loop, named in RL_SCEN (RD-Agent's own setting) and
imported by the loop before its first step:
- its RLPostTrainingScen leaves two of Scenario's abstract methods unimplemented, so `python -m
  rdagent.app.rl.loop` fails at once (TypeError: Can't instantiate abstract class); `Scenario` supplies them;
- RD-Agent logs its token counts only into pickles, so each litellm completion's usage and cost is printed to
  stdout as one JSON line, the records the `litellm` transcript parser sums;
- it prints and pickles its settings, keys included, into the log and code/log/: the key fields are blanked
  (litellm reads OPENAI_API_KEY from the environment itself, RD-Agent never passes them)."""

import json
import sys

import litellm
from rdagent.oai.backend.litellm import LITELLM_SETTINGS
from rdagent.oai.llm_conf import LLM_SETTINGS
from rdagent.scenarios.rl.scen.scenario import RLPostTrainingScen

for _settings in (LITELLM_SETTINGS, LLM_SETTINGS):
    for _field in type(_settings).model_fields:
        if _field.endswith("api_key") and getattr(_settings, _field):
            setattr(_settings, _field, "")


class Scenario(RLPostTrainingScen):
    @property
    def rich_style_description(self) -> str:
        return self.background

    def get_scenario_all_desc(self, task=None, filtered_tag=None, simple_background=None) -> str:
        return self.background


def _record(kwargs, response, start_time, end_time) -> None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return
    details = getattr(usage, "prompt_tokens_details", None)
    print(
        "\n"
        + json.dumps(
            {
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": getattr(details, "cached_tokens", 0) or 0},
                },
                "response_cost": kwargs.get("response_cost"),
            }
        ),
        file=sys.stdout,
        flush=True,
    )


litellm.success_callback.append(_record)
