import os

import torch
import torch.nn as nn

# Filled in by the test: the log.
LOG = "@LOG@"


class Model(nn.Module):
    """relu_mid's ReLU that logs, at every call, the CPUs its thread may
    run on: where the reference's loop ran, seen from inside it."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        with open(LOG, "a") as f:
            f.write("ref %s\n" % ",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
        return torch.relu(x)


batch_size = 2048
dim = 2048


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
