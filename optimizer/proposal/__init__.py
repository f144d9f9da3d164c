"""Proposal: the request to a patcher, the proposers, the patch formats and checks, the search over
candidates and the ablation of a patch's parts."""
