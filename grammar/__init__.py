"""The Dragon grammar, shipped as package data (``dragon_dsl._grammar``)."""
