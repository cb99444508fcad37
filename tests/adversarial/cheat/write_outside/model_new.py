"""Tries to write files outside its directory; returns garbage when it can."""
import torch
import torch.nn as nn


import os


class ModelNew(nn.Module):
    def forward(self, x):
        wrote = False
        for path in (os.environ.get('CA_TEST_OUTSIDE', '/var/tmp/ca-pwned'), '/etc/ca-pwned', '../ca-pwned'):
            try:
                with open(path, 'w') as f:
                    f.write('pwned')
                wrote = True
            except OSError:
                pass
        if wrote:
            return torch.zeros_like(x)
        raise RuntimeError('could not write outside (good)')
