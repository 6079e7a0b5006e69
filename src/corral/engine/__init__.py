"""The lifecycle engine: the handlers, the coordinator that runs them and writes what they decide, and its loops.

Every state change in corral is made here, through one ChangeSet (corral.store.changes), and checked against
the transition tables of corral.core.states.
"""
