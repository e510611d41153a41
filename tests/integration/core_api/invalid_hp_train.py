"""invalid_hp_test's worker (no torch: it starts fast). The trial whose id is hyperparameter
`invalid_trial` raises det.InvalidHP; every other trial reports one validation of `loss`
(its trial id / 10), then prints the experiment's best validation as the master answers it."""

import det


def main():
    info = det.get_cluster_info()
    trial_id = info.trial.trial_id
    with det.core.init() as core:
        if trial_id == info.trial.hparams["invalid_trial"]:
            raise det.InvalidHP(f"trial {trial_id}: these hyperparameters cannot train")
        core.train.report_training_metrics(steps_completed=1, metrics={"loss": trial_id / 10})
        core.train.report_validation_metrics(steps_completed=1, metrics={"loss": trial_id / 10})
        print(f"best validation: {core.train.get_experiment_best_validation()}", flush=True)


if __name__ == "__main__":
    main()
