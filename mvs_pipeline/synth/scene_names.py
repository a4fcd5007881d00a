"""The synthetic scenes' names: light to import (the command line offers them as choices before
anything is rendered, and rendering pulls in open3d)."""

SCENE_NAMES = ("object", "courtyard", "room", "room_seen", "street")
