"""The read-access policy: who may read which session, and how an address resolves.

``visibility`` is the one check every read and control goes through (a denied
target looks like a missing one); ``branches`` resolves a ``to`` address and
archives; ``discovery`` lists and searches what a viewer may see. Tools call
these directly, so they sit below ``chaz.tools``.
"""
