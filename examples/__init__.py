"""Example Ripple apps (`ripple dev --app examples.onboarding`)."""
