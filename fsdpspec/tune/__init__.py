"""`fsdpspec tune`: the fastest configuration of a job that fits, by the step-time model."""
