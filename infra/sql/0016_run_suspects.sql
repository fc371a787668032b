-- Suspects: a run whose worker was lost (its lease expired while it was `running`) may have
-- been the cause (a step that kills its process) or a bystander. Such a run is claimed in
-- isolation, alone on a worker with nothing else in flight, until it records a step or
-- suspends. `suspect` is set by the claim that takes a run in isolation and cleared by that
-- progress; only a run lost while it was a suspect is charged a recovery (`recoveries`, the
-- crash budget of migration 0008), so runs that shared a worker with a crashing run are not.
ALTER TABLE ripple_runs ADD COLUMN suspect boolean NOT NULL DEFAULT false;
