"""The resolved job: `resolve(spec, base_dir) -> Job`, every fact of a job derived from
its spec once — model geometry, layout, FSDP units by module name, checkpointed layers,
inputs, run-directory names — for the planner, the rules, the runners and the engine."""
