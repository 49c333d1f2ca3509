"""What a job touches beside the GPUs (issue 58): the host's limits, storage, and the
software the provider must patch, judged against NVIDIA's bulletins."""
