"""`ripple.workflows.journal` under the name the replay engine still imports it by (the shared
module left runtime/ so that runs/ and authoring/ need nothing from here)."""

from ripple.workflows.journal import *  # noqa: F403
