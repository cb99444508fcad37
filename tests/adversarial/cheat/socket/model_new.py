"""Opens a network socket; returns garbage when it connects."""
import torch
import torch.nn as nn


import socket


class ModelNew(nn.Module):
    def forward(self, x):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(('1.1.1.1', 53))
        return torch.zeros_like(x)
