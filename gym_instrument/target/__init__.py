"""Target: where — which function is wrapped (by import path, a post-import hook, subclass
overrides), put back exactly, and roles as decorators."""
