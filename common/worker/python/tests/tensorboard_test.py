"""det's TensorBoard writer (det.pytorch._harness.tensorboard.ScalarWriter): the files it
writes, read back with an independent reader (tests/tfevents.py)."""

import os
import tempfile
import unittest

import torch

from det.pytorch._harness import tensorboard
from tests import tfevents


class ScalarWriterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def files(self, logdir):
        return [os.path.join(logdir, f) for f in os.listdir(logdir) if "tfevents" in f]

    def test_crc32c_matches_the_standard_check_value(self):
        self.assertEqual(tensorboard.crc32c(b"123456789"), 0xE3069283)
        self.assertEqual(tfevents.crc32c(b"123456789"), 0xE3069283)

    def test_scalars_round_trip(self):
        logdir = os.path.join(self.tmp.name, "tb")
        with tensorboard.ScalarWriter(logdir) as writer:
            writer.add_scalar("loss", 0.5, 10)
            writer.add_scalar("loss", torch.tensor(0.25), 20)
            writer.add_scalar("negative_step", 1.0, -3)
            writer.add_scalars("lr", {"a": 0.1, "b": 0.2}, 20)
            writer.add_scalar("no_step", 7)
        [path] = self.files(logdir)
        events = tfevents.read_events(path)
        self.assertEqual(events[0].file_version, "brain.Event:2")
        got = tfevents.scalars(path)
        self.assertEqual(got["loss"], [(10, 0.5), (20, 0.25)])
        self.assertEqual(got["negative_step"], [(-3, 1.0)])
        self.assertEqual([(s, len(got[t])) for t in ("lr/a", "lr/b") for s, _ in got[t]],
                         [(20, 1), (20, 1)])
        self.assertAlmostEqual(got["lr/a"][0][1], 0.1, places=6)
        self.assertAlmostEqual(got["lr/b"][0][1], 0.2, places=6)
        self.assertEqual(got["no_step"], [(0, 7.0)])

    def test_other_summaries_and_closed_writers_are_named(self):
        writer = tensorboard.ScalarWriter(self.tmp.name)
        with self.assertRaisesRegex(NotImplementedError, "add_image: .*scalars only.*tensorboard"):
            writer.add_image("img", None)
        writer.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            writer.add_scalar("x", 1.0, 1)
        with self.assertRaises(AttributeError):
            writer.no_such_method  # noqa: B018

    def test_metrics_use_determined_names(self):
        with tensorboard.ScalarWriter(self.tmp.name) as writer:
            tensorboard.log_metrics(writer, "training", 4, {"loss": 1.5, "note": "text",
                                                            "flag": True})
            tensorboard.log_metrics(writer, "validation", 4, {"loss": 2.0, "val_acc": 0.5})
        [path] = self.files(self.tmp.name)
        self.assertEqual(tfevents.scalars(path), {
            "Determined/loss": [(4, 1.5)], "Determined/val_loss": [(4, 2.0)],
            "Determined/val_acc": [(4, 0.5)]})


if __name__ == "__main__":
    unittest.main()
