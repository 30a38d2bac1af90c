"""The step-time tool: `python -m profiling --compare pil,roi` from the repository root.

Used from the checkout, not installed. One module per job: model (what is trained), step_timer
(per-phase timing, CUDA events on the GPU), train_loop (one timed run), trace (torch.profiler),
scalars (TensorBoard), report (statistics, table, JSON), plot (PNG), cli (the command line).
"""
