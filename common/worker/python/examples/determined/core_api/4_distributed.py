#!/usr/bin/env python3

"""
Stage 4: the same training, on several workers.

What a multi-slot trial gets from det without more code:
- the slots of all its workers scheduled together
- the chief's address passed to every worker
- collectives between workers (allgather, gather, broadcast)
- preemption agreed across workers
- logs filtered by rank (det trial logs --rank)
"""

import logging
import pathlib
import queue
import subprocess
import sys
import threading
import time

import det


def save_state(x, steps_completed, trial_id, checkpoint_directory):
    with checkpoint_directory.joinpath("state").open("w") as f:
        f.write(f"{x},{steps_completed},{trial_id}")


def load_state(trial_id, checkpoint_directory):
    checkpoint_directory = pathlib.Path(checkpoint_directory)
    with checkpoint_directory.joinpath("state").open("r") as f:
        x, steps_completed, ckpt_trial_id = [int(field) for field in f.read().split(",")]
    if ckpt_trial_id == trial_id:
        return x, steps_completed
    else:
        return x, 0


def main(core_context, latest_checkpoint, trial_id, increment_by):
    x = 0

    starting_batch = 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, starting_batch = load_state(trial_id, path)

    batch = starting_batch
    last_checkpoint_batch = None
    for op in core_context.searcher.operations():
        while batch < op.length:
            # NEW: add every worker's increment_by. The sum is increment_by times the
            # number of workers; the point is the collective.
            all_increment_bys = core_context.distributed.allgather(increment_by)
            x += sum(all_increment_bys)
            steps_completed = batch + 1
            time.sleep(.1)
            # NEW: log from the chief alone, to keep the log short.
            if core_context.distributed.rank == 0:
                print("x is now", x)
            if steps_completed % 10 == 0:
                # NEW: the chief alone reports metrics and progress, and stores checkpoints.
                if core_context.distributed.rank == 0:
                    core_context.train.report_training_metrics(
                        steps_completed=steps_completed, metrics={"x": x}
                    )
                    op.report_progress(steps_completed)
                    checkpoint_metadata = {"steps_completed": steps_completed}
                    with core_context.checkpoint.store_path(
                        checkpoint_metadata
                    ) as (checkpoint_directory, uuid):
                        save_state(x, steps_completed, trial_id, checkpoint_directory)
                    last_checkpoint_batch = steps_completed
                if core_context.preempt.should_preempt():
                    return
            batch += 1

        # NEW: report_validation_metrics and report_completed are the chief's too.
        if core_context.distributed.rank == 0:
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed, metrics={"x": x}
            )
            op.report_completed(x)

    # NEW: the chief stores the final checkpoint, unless the last step was checkpointed.
    if core_context.distributed.rank == 0 and last_checkpoint_batch != steps_completed:
        checkpoint_metadata = {"steps_completed": steps_completed}
        with core_context.checkpoint.store_path(checkpoint_metadata) as (path, uuid):
            save_state(x, steps_completed, trial_id, path)


# NEW: one worker process per slot. Frameworks (torch.distributed, horovod, deepspeed) bring
# launchers of their own; this one is written from scratch with subprocess and threads.
def launcher_main(slots_per_node, num_nodes, cross_rank):
    # One worker process per slot of this node.
    procs = []
    for local_rank in range(slots_per_node):
        rank = cross_rank * slots_per_node + local_rank
        cmd = [
            # det.launch.wrap_rank runs the worker under its rank, so that its log lines
            # can be filtered by rank.
            "python3",
            "-m",
            "det.launch.wrap_rank",
            str(rank),
            "--",
            # This script again, as a worker.
            "python3",
            __file__,
            "worker",
            str(rank),
            str(local_rank),
        ]
        procs.append(subprocess.Popen(cmd))

    # Wait for every worker, but when one fails, stop the others at once and exit nonzero,
    # so that a distributed job does not hang: a thread per worker puts its exit code on a
    # queue.
    q = queue.Queue()

    def wait_for_worker(proc):
        worker_exit = proc.wait()
        q.put((proc, worker_exit))

    threads = [threading.Thread(target=wait_for_worker, args=(proc,)) for proc in procs]

    for t in threads:
        t.start()

    first_failed_exit = 0
    for i in range(slots_per_node):
        proc, worker_exit = q.get()
        procs.remove(proc)
        if worker_exit != 0 and first_failed_exit == 0:
            # The first failure stops the other workers.
            first_failed_exit = worker_exit
            for proc in procs:
                proc.kill()

    for t in threads:
        t.join()

    return first_failed_exit


# NEW: each worker builds a DistributedContext for core.init().
def worker_main(slots_per_node, num_nodes, cross_rank, chief_ip, rank, local_rank):
    # Without a framework to set rank, local_rank and cross_rank, they come from the
    # ClusterInfo API.
    distributed = det.core.DistributedContext(
        rank=rank,
        size=num_nodes * slots_per_node,
        local_rank=local_rank,
        local_size=slots_per_node,
        cross_rank=cross_rank,
        cross_size=num_nodes,
        chief_ip=chief_ip,
    )

    with det.core.init(distributed=distributed) as core_context:
        main(
            core_context=core_context,
            latest_checkpoint=latest_checkpoint,
            trial_id=trial_id,
            increment_by=hparams["increment_by"],
        )


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, level=logging.INFO)

    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    latest_checkpoint = info.latest_checkpoint
    trial_id = info.trial.trial_id
    hparams = info.trial.hparams

    # NEW: the layout of the trial, from the ClusterInfo API.
    slots_per_node = len(info.slot_ids)
    num_nodes = len(info.container_addrs)
    cross_rank = info.container_rank
    chief_ip = info.container_addrs[0]

    # NEW: the script runs twice over: as the launcher of the workers, then as each worker.
    if sys.argv[1] == "launcher":
        # Usage: SCRIPT launcher
        exitcode = launcher_main(slots_per_node, num_nodes, cross_rank)
        sys.exit(exitcode)

    if sys.argv[1] == "worker":
        # Usage: SCRIPT worker $RANK $LOCAL_RANK
        print(f"worker starting")
        rank = int(sys.argv[2])
        local_rank = int(sys.argv[3])
        exitcode = worker_main(
            slots_per_node, num_nodes, cross_rank, chief_ip, rank, local_rank
        )
        sys.exit(exitcode)

    raise ValueError(f"unrecognized first argument: {sys.argv[1]}")
