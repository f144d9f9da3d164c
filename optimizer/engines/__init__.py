"""Model engines run on this machine, each a provider of the model layer like any outside one.

An engine registers itself through `optimizer.register_provider` when the entry point of the
`optimizer.providers` group named after its prefix is loaded, the first time a model of that
prefix is resolved. The model layer (`optimizer.models`) imports nothing from here.
"""
