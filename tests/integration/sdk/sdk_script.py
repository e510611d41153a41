"""sdk_test's user script: drives a real cluster with nothing but det.experimental.client, as a
Determined user's pipeline would.

    sdk_script.py CONFIG CONTEXT_DIR OUT_DIR

The master is $DET_MASTER; the session is the det CLI's stored one (HOME/.det/auth.json),
DET_TEST_PASSWORD is the admin's password (for the login with arguments). Creates the
experiment (sdk_train.py, a grid over q in {1, 2}), waits for it, checks the trials,
checkpoints, metrics and logs it reports, downloads the top checkpoint into OUT_DIR/top and
(by get_checkpoint and the default path) into OUT_DIR/checkpoints/<uuid>, registers it as
version 1 of the model "sdk-model" and downloads it through that model version into
OUT_DIR/model, checks their files, and prints "top checkpoint UUID", "model version NAME N
UUID" and "SDK OK". Any failed check raises (exit status 1)."""

import json
import os
import sys

from det.experimental import client, errors


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def check_files(path, q, step):
    with open(os.path.join(path, "weights.txt")) as f:
        check(f.read() == f"q={q} step={step}\n", f"{path}/weights.txt")
    with open(os.path.join(path, "sub", "extra.bin"), "rb") as f:
        check(f.read() == bytes(range(256)), f"{path}/sub/extra.bin")
    with open(os.path.join(path, "metadata.json")) as f:
        md = json.load(f)
    check(md.get("steps_completed") == step and md.get("q") == q, f"metadata.json: {md}")


def main():
    config, context, out = sys.argv[1:4]
    # Login from the det CLI's stored session: no arguments.
    d = client.login()
    check(d.whoami() == "admin", "the stored session is admin's")

    exp = client.create_experiment(config=config, model_dir=context)
    print(f"created experiment {exp.id}", flush=True)
    first = exp.await_first_trial(interval=0.2, timeout=240)
    check(first.id > 0, "a first trial")
    state = exp.wait(interval=0.5, timeout=300)
    check(state == client.ExperimentState.COMPLETED,
          f"experiment ended {state}: {client.get_experiment(exp.id).error}")
    check(exp.state == client.ExperimentState.COMPLETED and exp.progress == 1.0,
          f"reloaded by wait: {exp.state} {exp.progress}")
    check(exp.config["searcher"]["metric"] == "loss", f"config {exp.config}")

    trials = {t.hparams["q"]: t for t in exp.list_trials()}
    check(sorted(trials) == [1, 2], f"trials {trials}")
    for t in trials.values():
        check(t.state == client.TrialState.COMPLETED, f"trial {t.id} {t.state}")
        check(t.summary_metrics["validation_metrics"]["loss"]["count"] >= 2,
              f"trial {t.id} summary {t.summary_metrics}")

    # The best checkpoint by the searcher's metric (loss, smaller is better): q=2 at batch 1.
    top = exp.top_checkpoint()
    check(top.metadata == {"steps_completed": 1, "q": 2}, f"top {top.metadata}")
    check(top.training.validation_metrics["avgMetrics"]["loss"] == 0.20,
          f"top metrics {top.training.validation_metrics}")
    check(top.training.hparams["q"] == 2 and top.training.trial_id == trials[2].id,
          f"top training {top.training}")
    check(top.state == client.CheckpointState.COMPLETED, f"top state {top.state}")
    check(top.resources.get("weights.txt") == len("q=2 step=1\n"), f"resources {top.resources}")
    # One per trial, best trial first.
    best_two = [c.metadata for c in exp.top_n_checkpoints(2)]
    check(best_two == [{"steps_completed": 1, "q": 2}, {"steps_completed": 1, "q": 1}],
          f"top 2 {best_two}")
    worst = exp.top_checkpoint(sort_by="loss", smaller_is_better=False)
    check(worst.metadata == {"steps_completed": 2, "q": 1}, f"largest loss {worst.metadata}")
    listed = exp.list_checkpoints(sort_by=client.CheckpointSortBy.BATCH_NUMBER,
                                  order_by=client.OrderBy.DESC)
    check(len(listed) == 4 and [c.total_batches for c in listed] == [2, 2, 1, 1],
          f"listed {[c.metadata for c in listed]}")

    t1 = client.get_trial(trials[1].id)
    check(t1.top_checkpoint().metadata == {"steps_completed": 1, "q": 1},
          "trial 1's best is batch 1, not its latest")
    check(t1.select_checkpoint(latest=True).metadata == {"steps_completed": 2, "q": 1},
          "trial 1's latest is batch 2")
    check([c.metadata["steps_completed"] for c in t1.list_checkpoints()] == [1, 2],
          "trial 1's checkpoints, best first")
    validation = list(t1.iter_metrics("validation"))
    check([(m.steps_completed, m.metrics["loss"]) for m in validation] == [(1, 0.30), (2, 0.40)],
          f"validation metrics {validation}")
    logs = list(t1.logs())
    context_line = [line for line in logs if "context files:" in line]
    check(context_line and "'data/notes.txt'" in context_line[0] and
          "junk" not in context_line[0], f"context files seen by the worker: {context_line}")
    check(list(t1.logs(tail=1)) == logs[-1:], "logs(tail=1)")

    # Download the top checkpoint: to a path, and by uuid to the default path.
    path = top.download(os.path.join(out, "top"))
    check(path == os.path.join(out, "top"), f"download path {path}")
    check_files(path, 2, 1)
    os.chdir(out)
    again = client.get_checkpoint(top.uuid).download()
    check(again == os.path.join("checkpoints", top.uuid), f"default path {again}")
    check_files(again, 2, 1)

    check(exp.id in [e.id for e in client.list_experiments()], "list_experiments")
    check([e.id for e in client.list_experiments(states=[client.ExperimentState.ACTIVE])] == [],
          "no active experiment")

    # Login with arguments; a wrong password and an unknown id are typed errors.
    other = client.Determined(master=os.environ["DET_MASTER"], user="admin",
                              password=os.environ["DET_TEST_PASSWORD"])
    check(other.token and other.token != d.token, "a session of its own")
    check(other.get_experiment(exp.id).state == client.ExperimentState.COMPLETED, "other")
    try:
        client.Determined(master=os.environ["DET_MASTER"], user="admin", password="wrong-one")
        raise AssertionError("a wrong password logged in")
    except errors.UnauthenticatedException:
        pass
    try:
        client.get_experiment(99999)
        raise AssertionError("experiment 99999 exists")
    except errors.NotFoundException as e:
        check("99999" in str(e), str(e))

    # The model registry: the top checkpoint becomes version 1 of a model, which is how the
    # checkpoint that ships is found and downloaded later.
    model = client.create_model("sdk-model", description="the SDK test's model",
                                metadata={"source": "sdk_script"}, labels=["sdk"])
    check(model.get_version() is None, "a new model has no versions")
    registered = model.register_version(top.uuid)
    check(registered.model_version == 1 and registered.checkpoint.uuid == top.uuid,
          f"registered {registered}")
    try:
        client.create_model("sdk-model")
        raise AssertionError("a second model of the same name")
    except errors.APIException as e:
        check(e.code == "ALREADY_EXISTS", str(e))
    found = client.get_model("sdk-model")
    check(found.labels == ["sdk"] and found.metadata == {"source": "sdk_script"} and
          found.num_versions == 1, f"model {found.to_json()}")
    check([m.name for m in client.list_models()] == ["sdk-model"], "list_models")
    latest = found.get_version()
    check(latest.model_version == 1 and latest.model_name == "sdk-model" and
          latest.checkpoint.uuid == top.uuid and latest.checkpoint.trial_id == trials[2].id,
          f"latest {latest}")
    path = latest.checkpoint.download(os.path.join(out, "model"))
    check_files(path, 2, 1)
    # The registered checkpoint is protected: deleting it is refused, naming the version.
    try:
        latest.checkpoint.delete()
        raise AssertionError("a registered checkpoint was deleted")
    except errors.BadRequestException as e:
        check("version 1 of model 'sdk-model'" in str(e), str(e))
    print(f"model version {latest.model_name} {latest.model_version} {latest.checkpoint.uuid}",
          flush=True)

    print(f"top checkpoint {top.uuid}", flush=True)
    print("SDK OK", flush=True)


if __name__ == "__main__":
    main()
