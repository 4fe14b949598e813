"""Link: what names a rollout (its identity and the index form of its id) and the bounded memory
that lets a health verdict find its already ended dispatch span."""
