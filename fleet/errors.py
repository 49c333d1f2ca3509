"""Errors a user can act on. Core code raises these; only the CLI prints them."""

from __future__ import annotations


class FleetError(Exception):
    """Base class: the message names the file, line or field, and the way out."""

    exit_code = 1


class InputError(FleetError):
    """Bad input from the user (a file, an option): exit status 2."""

    exit_code = 2


class AgentError(FleetError):
    """The agent failed or sent something that is not a valid fleet-agent/1 document."""

    exit_code = 3


class StoreError(FleetError):
    """The database cannot be opened, is at a schema this fleet does not know, or failed."""

    exit_code = 4


class ClusterError(FleetError):
    """A cluster's tests cannot go ahead: too few nodes, no known-good node, no rendezvous."""
