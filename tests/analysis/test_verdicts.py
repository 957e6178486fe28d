"""attnsim.analysis.verdicts: ablation verdicts by z-score, and the warning beside a z-score of few random draws."""

from __future__ import annotations

from attnsim.analysis.runs import LoggedRun
from attnsim.analysis.verdicts import FEW_DRAWS, intervention_verdicts


def ablation_run(draws: int) -> LoggedRun:
    metrics = {"ablation/clean_accuracy": 0.9, "ablation/top_accuracy_zscore": 3.0, "ablation/top_accuracy_effect": 0.3}
    metrics.update({"ablation/top_accuracy_random_mean": 0.05, "ablation/top_accuracy_random_std": 0.08})
    return LoggedRun("a" * 32, "ablation", "FINISHED", "0", params={"interventions.random_draws": str(draws)}, metrics=metrics)


def test_z_of_at_least_two_spreads_holds_and_few_draws_are_said():
    ((name, metric, verdict, line),) = intervention_verdicts(ablation_run(2))
    assert (name, metric, verdict) == ("top", "accuracy", "holds")  # z = 3 >= 2
    assert "z = 3" in line and f"from 2 random draws only: a rough spread, rerun with interventions.random_draws={FEW_DRAWS} or more" in line
    ((_, _, _, enough),) = intervention_verdicts(ablation_run(FEW_DRAWS))
    assert "draws only" not in enough
