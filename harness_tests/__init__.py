"""Tests of the harness (``gym_harness``) and of the e2e and whole-run entry points: apart from the
package's unit tests in tests/, run by ``make test`` beside them."""
