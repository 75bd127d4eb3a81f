"""What the tests share: people, agents and graphs, the harness and its scene, paths.

Test modules import helpers from here (and bench/ does too), never from each other.
"""
