"""Runtime: from a launch to moving tensors between ranks.

launch (MPI or torchrun -> torch.distributed, clean exits), collectives (sums and broadcasts a loop needs),
exchange (the halo all-to-all, cached, compressed and overlapped), codec and kernels (how rows are packed),
adaptive (bit-width choice), malloc (keeping freed memory in the process).
"""
