import torch
import torch.nn as nn

# Filled in by the test: a file of process ids to watch, and the log.
PIDS = "@PIDS@"
LOG = "@LOG@"


def _state(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


class Model(nn.Module):
    """relu_mid's ReLU that logs, at every call, the state of each process
    named in PIDS (T: stopped): what ran beside the reference while it was
    timed, seen from inside it."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        try:
            with open(PIDS) as f:
                pids = f.read().split()
        except OSError:
            pids = []
        with open(LOG, "a") as f:
            f.write(" ".join(_state(p) for p in pids) + "\n")
        return torch.relu(x)


batch_size = 2048
dim = 2048


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
