"""The synthetic scenes: geometry, materials, light, camera paths and laser scanner set-ups.

- object:    a table (~1.2 m) with a box, sphere, torus, cylinder and cone on it, on a 5x5 m
             floor; cameras on two rings around it, all looking at it; studio background.
- courtyard: ~14x12 m open space between building blocks, an arcade of pillars, a fountain,
             benches; cameras walk a loop and look across the yard; sky above (no surface).
- room:      5x4x3 m room with nearly uniform (low-texture) walls and ceiling, a textured
             floor, rug and furniture; cameras inside look across the room at the walls.
- room_seen: the room, its scans kept to what the views see (the oracle then scores ~1).
- street:    a 12 m wide street of blocks, as long as the views need (0.8 m per 6 views, plus
             20 m at each end); cameras walk along it looking at both facades; sky above;
             scanners tiled along it, their scans kept to what the views see.

Geometry is fixed per scene; the seed changes texture patterns, camera jitter, scanner
headings, exposures and sensor noise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .camera import Camera, intrinsics, look_at
from .geometry import MeshBuilder, SceneMesh
from .texture import Material


@dataclass(frozen=True)
class Light:
    kind: Literal["sun", "point"]
    vector: tuple[float, float, float]  # sun: unit direction towards the sun; point: position (m)
    ambient: float  # fraction of the albedo seen in full shadow
    reference_distance: float = 1.0  # point light: distance (m) at which the direct term peaks

    def to_json(self) -> dict:
        key = "direction_to_light" if self.kind == "sun" else "position"
        return {"kind": self.kind, key: list(self.vector), "ambient": self.ambient,
                **({"reference_distance_m": self.reference_distance} if self.kind == "point" else {})}


@dataclass(frozen=True)
class Scanner:
    """A levelled laser scanner: position, heading, and what it scans.

    With `roi` it scans the angular window that covers that world box and keeps only hits
    inside it (a scan of the object of interest); without, it scans all azimuths over
    `elevation_range` and keeps every hit.
    """

    position: tuple[float, float, float]  # m, world
    yaw: float  # rad, heading of the scanner frame about world z
    roi: tuple[tuple[float, float, float], tuple[float, float, float]] | None = None  # world box (lo, hi)
    elevation_range: tuple[float, float] = (-np.pi / 2, np.pi / 2)  # rad, used when roi is None


@dataclass
class SceneSpec:
    name: str
    mesh: SceneMesh
    cameras: list[Camera]
    light: Light
    background: Literal["sky", "studio"]
    scanners: list[Scanner]
    scan_spacing: float  # m, default point spacing at `scan_reference_distance`
    scan_reference_distance: float | None  # m; None: distance from each scanner to its roi centre
    # Scan points kept only where this many views see them (seen_scans.py); None keeps them all.
    scans_seen_by: int | None = None
    # Default cap on the scans' rays: per scanner (a street's tiles) or, None, 3e6 for all together.
    scan_rays_per_scanner: int | None = None


def _unit(v) -> tuple[float, float, float]:
    v = np.asarray(v, dtype=np.float64)
    return tuple(float(x) for x in v / np.linalg.norm(v))


def _sun(azimuth_deg: float, elevation_deg: float) -> tuple[float, float, float]:
    az, el = np.radians(azimuth_deg), np.radians(elevation_deg)
    return _unit([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])


# ---------------------------------------------------------------- object
OBJECT_MATERIALS = [
    Material("floor_wood", (0.30, 0.18, 0.09), (0.72, 0.55, 0.34), "marble", wavelength=0.25, octaves=8,
             sharpness=1.6, stripe_axis=(1.0, 0.15, 0.0)),
    Material("table_stone", (0.16, 0.24, 0.20), (0.70, 0.74, 0.62), "fbm", wavelength=0.12, octaves=7,
             sharpness=1.5),
    Material("table_legs", (0.08, 0.07, 0.06), (0.45, 0.40, 0.35), "fbm", wavelength=0.08, octaves=6,
             sharpness=1.5),
    Material("box_paint", (0.70, 0.55, 0.08), (0.12, 0.10, 0.30), "fbm", wavelength=0.10, octaves=7,
             sharpness=3.0),
    Material("sphere_ceramic", (0.62, 0.12, 0.08), (0.90, 0.78, 0.55), "fbm", wavelength=0.06, octaves=6,
             sharpness=1.8),
    Material("torus_marble", (0.10, 0.20, 0.55), (0.80, 0.84, 0.88), "marble", wavelength=0.05, octaves=6,
             sharpness=1.5, stripe_axis=(0.3, 1.0, 0.5)),
    Material("cylinder_copper", (0.45, 0.20, 0.08), (0.20, 0.50, 0.40), "fbm", wavelength=0.08, octaves=6,
             sharpness=2.2),
    Material("cone_felt", (0.12, 0.40, 0.12), (0.85, 0.80, 0.30), "fbm", wavelength=0.05, octaves=6,
             sharpness=1.5),
]

TABLE_TOP_Z = 0.46  # m
OBJECT_TARGET = np.array([0.0, 0.0, 0.58])  # where the cameras look (m)


def _object_mesh() -> SceneMesh:
    b = MeshBuilder(OBJECT_MATERIALS)
    b.add_quad((-2.5, -2.5, 0.0), (5.0, 0.0, 0.0), (0.0, 5.0, 0.0), "floor_wood")
    b.add_box((-0.6, -0.4, TABLE_TOP_Z - 0.04), (0.6, 0.4, TABLE_TOP_Z), "table_stone")
    for sx in (-1, 1):
        for sy in (-1, 1):
            x, y = sx * 0.52, sy * 0.32
            b.add_box((x - 0.03, y - 0.03, 0.0), (x + 0.03, y + 0.03, TABLE_TOP_Z - 0.04), "table_legs")
    z = TABLE_TOP_Z
    b.add_box((-0.45, -0.02, z), (-0.15, 0.22, z + 0.26), "box_paint", yaw=0.4)
    b.add_sphere((0.22, 0.16, z + 0.13), 0.13, "sphere_ceramic")
    b.add_torus((0.0, -0.20, z + 0.045), 0.13, 0.045, "torus_marble")
    b.add_cylinder((0.40, -0.18, z), 0.07, 0.30, "cylinder_copper")
    b.add_cone((-0.38, -0.24, z), 0.09, 0.22, "cone_felt")
    b.add_torus((-0.05, 0.22, z + 0.12), 0.09, 0.03, "torus_marble", tilt=1.2)
    return b.build()


def _object_cameras(views: int, K: np.ndarray, width: int, height: int, rng: np.random.Generator) -> list[Camera]:
    cams = []
    for k in range(views):
        az = 2 * np.pi * k / views + rng.uniform(-0.05, 0.05)
        el = np.radians((28.0 if k % 2 == 0 else 44.0) + rng.uniform(-3, 3))
        dist = rng.uniform(1.7, 2.0)
        center = OBJECT_TARGET + dist * np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
        target = OBJECT_TARGET + rng.uniform(-0.04, 0.04, 3)
        R, t = look_at(center, target, roll=np.radians(rng.uniform(-2, 2)))
        cams.append(Camera(K, R, t, width, height))
    return cams


def _object_scene(views: int, width: int, height: int, rng: np.random.Generator) -> SceneSpec:
    K = intrinsics(width, height, 1.0)
    roi = ((-0.9, -0.7, 0.0), (0.9, 0.7, 1.0))
    scanners = []
    for az_deg in (30.0, 150.0, 270.0):
        az = np.radians(az_deg + rng.uniform(-10, 10))
        pos = (1.4 * np.cos(az), 1.4 * np.sin(az), 1.3)
        scanners.append(Scanner(position=pos, yaw=float(rng.uniform(0, 2 * np.pi)), roi=roi))
    return SceneSpec("object", _object_mesh(), _object_cameras(views, K, width, height, rng),
                     Light("sun", _sun(40.0, 55.0), ambient=0.3), "studio", scanners,
                     scan_spacing=0.002, scan_reference_distance=None)


# ---------------------------------------------------------------- courtyard
COURTYARD_MATERIALS = [
    Material("cobbles", (0.22, 0.20, 0.18), (0.62, 0.58, 0.52), "fbm", wavelength=0.4, octaves=8,
             sharpness=2.0),
    Material("plaster_ochre", (0.55, 0.38, 0.15), (0.80, 0.70, 0.50), "fbm", wavelength=0.6, octaves=8,
             sharpness=1.5),
    Material("brick", (0.45, 0.14, 0.08), (0.75, 0.55, 0.45), "marble", wavelength=0.4, octaves=8,
             sharpness=2.0, stripe_axis=(0.0, 0.0, 1.0)),
    Material("concrete", (0.30, 0.30, 0.32), (0.72, 0.72, 0.70), "fbm", wavelength=0.5, octaves=8,
             sharpness=1.8),
    Material("stone", (0.50, 0.48, 0.42), (0.85, 0.82, 0.75), "marble", wavelength=0.5, octaves=8,
             sharpness=1.5, stripe_axis=(0.4, 0.3, 1.0)),
    Material("wood", (0.25, 0.13, 0.05), (0.60, 0.42, 0.22), "marble", wavelength=0.3, octaves=7,
             sharpness=1.5, stripe_axis=(1.0, 0.1, 0.05)),
    Material("water_basin", (0.10, 0.25, 0.30), (0.45, 0.60, 0.55), "fbm", wavelength=0.4, octaves=8,
             sharpness=1.5),
]

COURTYARD_CENTER = np.array([0.0, -0.5, 0.0])


def _courtyard_mesh() -> SceneMesh:
    b = MeshBuilder(COURTYARD_MATERIALS)
    b.add_quad((-20.0, -20.0, 0.0), (40.0, 0.0, 0.0), (0.0, 40.0, 0.0), "cobbles")
    b.add_box((-8.0, 6.0, 0.0), (8.0, 10.0, 7.0), "plaster_ochre")  # north block
    b.add_box((-8.0, -10.0, 0.0), (2.0, -6.5, 5.0), "brick")  # south block
    b.add_box((-11.5, -6.5, 0.0), (-7.5, 6.0, 6.0), "concrete")  # west block
    b.add_box((4.0, -11.0, 0.0), (9.0, -7.0, 9.0), "concrete")  # south-east tower
    b.add_box((7.5, -6.0, 0.0), (8.0, 3.0, 2.5), "brick")  # low east wall, sky and far block behind
    b.add_box((13.0, -4.0, 0.0), (17.0, 6.0, 6.0), "plaster_ochre")  # far east block
    for x in (-6.0, -3.0, 0.0, 3.0, 6.0):  # arcade in front of the north block
        b.add_cylinder((x, 4.5, 0.0), 0.28, 3.4, "stone")
    b.add_box((-6.4, 4.1, 3.4), (6.4, 4.9, 3.9), "stone")  # lintel over the pillars
    c = COURTYARD_CENTER
    b.add_cylinder(c, 1.3, 0.5, "water_basin")  # fountain basin
    b.add_torus(c + [0.0, 0.0, 0.5], 1.3, 0.12, "stone")  # basin rim
    b.add_cylinder(c, 0.22, 1.6, "stone")  # fountain column
    b.add_sphere(c + [0.0, 0.0, 1.8], 0.28, "stone")
    for x0, y0, yaw in ((-4.5, -3.5, 0.3), (3.5, -3.8, -0.4), (4.5, 2.0, 1.4)):  # benches
        b.add_box((x0 - 0.9, y0 - 0.22, 0.40), (x0 + 0.9, y0 + 0.22, 0.48), "wood", yaw=yaw)
        for dx in (-0.7, 0.7):
            lx = x0 + dx * np.cos(yaw)
            ly = y0 + dx * np.sin(yaw)
            b.add_box((lx - 0.08, ly - 0.18, 0.0), (lx + 0.08, ly + 0.18, 0.40), "stone", yaw=yaw)
    return b.build()


def _courtyard_cameras(views: int, K: np.ndarray, width: int, height: int,
                       rng: np.random.Generator) -> list[Camera]:
    # A walk along an elliptic loop around the fountain, looking across the yard, 25 degrees
    # off the line through the fountain. Consecutive views move at most 18 degrees round the
    # loop, so every surface is seen by >= 3 views; with few views the walk covers part of it.
    step = min(2 * np.pi / views, np.radians(18.0))
    theta0 = rng.uniform(0, 2 * np.pi)
    c = COURTYARD_CENTER
    cams = []
    for k in range(views):
        theta = theta0 + k * step + rng.uniform(-0.03, 0.03)
        center = c + [4.6 * np.cos(theta), 3.6 * np.sin(theta), 1.6 + rng.uniform(-0.1, 0.1)]
        look = theta + np.pi + np.radians(25.0)
        target = center + [6.0 * np.cos(look), 6.0 * np.sin(look), rng.uniform(-0.4, 0.0)]
        R, t = look_at(center, target, roll=np.radians(rng.uniform(-2, 2)))
        cams.append(Camera(K, R, t, width, height))
    return cams


def _courtyard_scene(views: int, width: int, height: int, rng: np.random.Generator) -> SceneSpec:
    K = intrinsics(width, height, 0.8)
    el = (np.radians(-55.0), np.radians(40.0))
    scanners = [Scanner(position=p, yaw=float(rng.uniform(0, 2 * np.pi)), elevation_range=el)
                for p in ((-3.0, -3.2, 1.7), (3.4, 1.2, 1.7), (-2.2, 2.8, 1.7))]
    return SceneSpec("courtyard", _courtyard_mesh(), _courtyard_cameras(views, K, width, height, rng),
                     Light("sun", _sun(125.0, 40.0), ambient=0.45), "sky", scanners,
                     scan_spacing=0.01, scan_reference_distance=3.5)


# ---------------------------------------------------------------- room
ROOM_SIZE = (5.0, 4.0, 3.0)  # m, x, y, z; the room spans [-x/2, x/2] x [-y/2, y/2] x [0, z]
# Walls and ceiling: nearly uniform paint. The pattern's range (~3 % of the albedo, about
# +-2 grey levels after gamma) sits at the level of the sensor noise: deliberately hard for
# photometric matching, the case planar priors and geometric consistency exist for.
LOW_TEXTURE_MATERIALS = ("wall_paint", "ceiling_paint")
ROOM_MATERIALS = [
    Material("wall_paint", (0.72, 0.70, 0.65), (0.69, 0.67, 0.62), "fbm", wavelength=0.8, octaves=3,
             sharpness=1.0, detail=0.0),
    Material("ceiling_paint", (0.78, 0.78, 0.76), (0.75, 0.75, 0.73), "fbm", wavelength=1.0, octaves=3,
             sharpness=1.0, detail=0.0),
    Material("parquet", (0.28, 0.16, 0.07), (0.68, 0.50, 0.30), "marble", wavelength=0.15, octaves=8,
             sharpness=1.8, stripe_axis=(1.0, 0.05, 0.0)),
    Material("rug", (0.55, 0.10, 0.10), (0.15, 0.15, 0.45), "fbm", wavelength=0.2, octaves=7,
             sharpness=3.0),
    Material("cabinet_wood", (0.35, 0.20, 0.08), (0.75, 0.60, 0.40), "marble", wavelength=0.12, octaves=7,
             sharpness=1.6, stripe_axis=(0.05, 0.1, 1.0)),
    Material("table_laminate", (0.20, 0.22, 0.25), (0.75, 0.72, 0.65), "fbm", wavelength=0.15, octaves=7,
             sharpness=1.8),
    Material("sofa_fabric", (0.15, 0.35, 0.30), (0.65, 0.75, 0.55), "fbm", wavelength=0.12, octaves=7,
             sharpness=2.0),
    Material("ottoman_leather", (0.50, 0.30, 0.10), (0.20, 0.08, 0.05), "fbm", wavelength=0.1, octaves=7,
             sharpness=1.5),
]


def _room_mesh() -> SceneMesh:
    b = MeshBuilder(ROOM_MATERIALS)
    sx, sy, sz = ROOM_SIZE
    x0, y0 = -sx / 2, -sy / 2
    b.add_quad((x0, y0, 0.0), (sx, 0.0, 0.0), (0.0, sy, 0.0), "parquet")
    b.add_quad((x0, y0, sz), (sx, 0.0, 0.0), (0.0, sy, 0.0), "ceiling_paint")
    b.add_quad((x0, y0, 0.0), (sx, 0.0, 0.0), (0.0, 0.0, sz), "wall_paint")  # south (y = -2)
    b.add_quad((x0, -y0, 0.0), (sx, 0.0, 0.0), (0.0, 0.0, sz), "wall_paint")  # north
    b.add_quad((x0, y0, 0.0), (0.0, sy, 0.0), (0.0, 0.0, sz), "wall_paint")  # west (x = -2.5)
    b.add_quad((-x0, y0, 0.0), (0.0, sy, 0.0), (0.0, 0.0, sz), "wall_paint")  # east
    b.add_box((-1.0, -1.1, 0.0), (1.0, 1.1, 0.012), "rug")
    b.add_box((1.55, -1.85, 0.0), (2.35, -1.3, 1.25), "cabinet_wood")
    b.add_box((1.9, 0.6, 0.0), (2.4, 1.8, 1.9), "cabinet_wood")  # tall bookcase against the east wall
    b.add_box((-0.5, -0.3, 0.72), (0.7, 0.5, 0.76), "table_laminate")
    for lx in (-0.45, 0.65):
        for ly in (-0.25, 0.45):
            b.add_box((lx - 0.025, ly - 0.025, 0.012), (lx + 0.025, ly + 0.025, 0.72), "table_laminate")
    b.add_box((-2.2, -1.0, 0.0), (-1.35, 1.2, 0.45), "sofa_fabric")  # seat
    b.add_box((-2.45, -1.0, 0.0), (-2.2, 1.2, 0.9), "sofa_fabric")  # backrest
    b.add_box((0.9, 0.9, 0.0), (1.4, 1.4, 0.45), "ottoman_leather", yaw=0.3)
    b.add_sphere((1.95, -1.55, 1.25 + 0.15), 0.15, "ottoman_leather")  # vase on the cabinet
    return b.build()


def _room_cameras(views: int, K: np.ndarray, width: int, height: int, rng: np.random.Generator) -> list[Camera]:
    # Cameras stand on the far side of the room and look across it at a wall. Consecutive
    # views turn by at most 22 degrees so that every wall point is seen by >= 3 views; with
    # few views the sweep covers less than the full circle.
    step = min(2 * np.pi / views, np.radians(22.0))
    yaw0 = rng.uniform(0, 2 * np.pi)
    cams = []
    for k in range(views):
        yaw = yaw0 + k * step + rng.uniform(-0.03, 0.03)
        d = np.array([np.cos(yaw), np.sin(yaw)])
        center = np.array([-1.1 * d[0], -0.8 * d[1], 1.5 + rng.uniform(-0.1, 0.1)])
        target = np.array([center[0] + 3.0 * d[0], center[1] + 3.0 * d[1], 0.75])
        R, t = look_at(center, target, roll=np.radians(rng.uniform(-2, 2)))
        cams.append(Camera(K, R, t, width, height))
    return cams


def _room_scene(views: int, width: int, height: int, rng: np.random.Generator) -> SceneSpec:
    K = intrinsics(width, height, 0.8)
    el = (np.radians(-85.0), np.radians(85.0))
    scanners = [Scanner(position=p, yaw=float(rng.uniform(0, 2 * np.pi)), elevation_range=el)
                for p in ((-0.8, 0.5, 1.4), (1.0, -0.6, 1.4))]
    light = Light("point", (0.3, 0.2, 2.75), ambient=0.35, reference_distance=2.3)
    return SceneSpec("room", _room_mesh(), _room_cameras(views, K, width, height, rng), light, "studio",
                     scanners, scan_spacing=0.01, scan_reference_distance=2.5)


# Scans kept where this many views see the point: two, what stereo can reconstruct at all (the
# oracle's rule too). With one, the ends of a room's sweep, seen by its first or last view
# alone, stay in the ground truth: 8 views of 320x240 then had oracle completeness 0.81 at 2 cm.
SCANS_SEEN_BY = 2



# ---------------------------------------------------------------- street
# A street that grows with the views, as a survey does: cameras walk along it and each surface
# point is seen by the ~10-30 views near it, not by all of them (tests/synth/test_street.py).
STREET_HALF_WIDTH = 6.0  # m, facades at y = +-6
# Views turn to the other side every 3 views, each one VIEW_SPACING further along; the 3 views
# of a side look back, straight and forward, and their pitches alternate, so the 3 overlap and
# every (yaw, pitch) pair recurs every 6 views of a side (1.6 m).
VIEW_SPACING = 0.8 / 6  # m along the street per view: 7.5 views a metre
STREET_YAWS = (-15.0, 0.0, 15.0)  # deg off the facade normal: back, straight, forward
STREET_PITCHES = (14.0, -4.0)  # deg: the upper floors, then the ground floor and pavement
STREET_END_MARGIN = 20.0  # m of street beyond the first and last station, so the end views see facades
SCAN_TILE = 15.0  # m of street per scanner; each keeps only the hits in its own stretch
SCAN_OVERHANG = 4.0  # m: about half of the facade one view shows
STREET_SCAN_RAYS = 1_500_000  # default rays per scanner: the scans grow with the street, not denser


def _street_mesh(x_lo: float, x_hi: float, rng: np.random.Generator) -> SceneMesh:
    """Blocks of 10-22 m with 4-7 m side streets between them on both sides of a 12 m street,
    facades with pilasters, balconies and a pavement kerb (relief for the depth maps)."""
    b = MeshBuilder(COURTYARD_MATERIALS)
    w = STREET_HALF_WIDTH
    b.add_quad((x_lo, -30.0, 0.0), (x_hi - x_lo, 0.0, 0.0), (0.0, 60.0, 0.0), "cobbles")
    facades = ("plaster_ochre", "brick", "concrete", "stone")

    def slab(x0, x1, side, depth, z0, z1, material):  # from the facade (y = side * w) into the street
        y = sorted((side * w, side * (w - depth)))
        b.add_box((x0, y[0], z0), (x1, y[1], z1), material)

    for side in (1.0, -1.0):
        x = x_lo
        while x < x_hi:
            length, height = rng.uniform(10.0, 22.0), rng.uniform(7.0, 13.0)
            slab(x, x + length, side, -9.0, 0.0, height, facades[int(rng.integers(len(facades)))])
            for px in np.arange(x + 1.5, x + length - 1.0, rng.uniform(2.8, 4.0)):
                slab(px, px + 0.45, side, 0.25, 0.0, height, "stone")
            for bz in np.arange(3.3, height - 1.5, 3.1):
                bx = x + rng.uniform(1.0, max(1.5, length - 4.0))
                slab(bx, bx + 2.2, side, 0.9, bz, bz + 0.18, "concrete")
            for px in np.arange(x, x + length - 1e-6, 2.0):  # pavement, in 2 m pieces: Open3D's
                # compute_distance (the tests' check) errs by mm next to a 20 m x 0.14 m face
                slab(px, min(px + 2.0, x + length), side, 1.6, 0.0, 0.14, "concrete")
            x += length + rng.uniform(4.0, 7.0)
    return b.build()


def _street_cameras(views: int, K: np.ndarray, width: int, height: int,
                    rng: np.random.Generator) -> list[Camera]:
    cams = []
    for k in range(views):
        side, i = (1.0 if k // 3 % 2 == 0 else -1.0), k // 6 * 3 + k % 3  # i: the view's index on its side
        yaw = np.radians(STREET_YAWS[i % len(STREET_YAWS)] + rng.uniform(-3, 3))
        pitch = np.radians(STREET_PITCHES[i % len(STREET_PITCHES)] + rng.uniform(-2, 2))
        center = np.array([k * VIEW_SPACING + rng.uniform(-0.05, 0.05), rng.uniform(-0.3, 0.3),
                           1.6 + rng.uniform(-0.1, 0.1)])
        look = np.array([side * np.sin(yaw), side * np.cos(yaw), 0.0])  # yaw > 0: towards +x
        target = center + 6.0 * (np.cos(pitch) * look + [0.0, 0.0, np.sin(pitch)])
        R, t = look_at(center, target, roll=np.radians(rng.uniform(-2, 2)))
        cams.append(Camera(K, R, t, width, height))
    return cams


def street_extent(views: int) -> tuple[float, float]:
    """(x_lo, x_hi) m: the street's stretch for `views` views (the cameras' plus a margin)."""
    last = (views - 1) * VIEW_SPACING
    return -STREET_END_MARGIN, last + STREET_END_MARGIN


def _street_scene(views: int, width: int, height: int, rng: np.random.Generator) -> SceneSpec:
    K = intrinsics(width, height, 0.8)
    cams = _street_cameras(views, K, width, height, rng)
    x_lo, x_hi = street_extent(views)
    # Scanners along the cameras' stretch and SCAN_OVERHANG past its ends, one per tile, each
    # keeping the hits in its tile: the scans' size grows with the street, their density stays.
    # Farther out the views see little of the surface (a survey's edge): no ground truth there.
    first, last = -SCAN_OVERHANG, (views - 1) * VIEW_SPACING + SCAN_OVERHANG
    tiles = max(2, int(np.ceil((last - first) / SCAN_TILE)))
    edges = np.linspace(first, last, tiles + 1)
    scanners = [Scanner(position=((a + b) / 2, 1.0 if i % 2 else -1.0, 1.7), yaw=float(rng.uniform(0, 2 * np.pi)),
                        roi=((a, -16.0, -0.5), (b, 16.0, 14.0)))
                for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))]
    return SceneSpec("street", _street_mesh(x_lo, x_hi, rng), cams, Light("sun", _sun(150.0, 45.0), ambient=0.45),
                     "sky", scanners, scan_spacing=0.01, scan_reference_distance=STREET_HALF_WIDTH,
                     scans_seen_by=SCANS_SEEN_BY, scan_rays_per_scanner=STREET_SCAN_RAYS)


# The room whose scans keep what the views see: the same cameras, images and depth maps as
# "room" with the same seed (the builder draws the same numbers), the ceiling and upper walls
# that no camera looks at left out of the ground truth, so perfect depth maps score ~1.


def _room_seen_scene(views: int, width: int, height: int, rng: np.random.Generator) -> SceneSpec:
    return dataclasses.replace(_room_scene(views, width, height, rng), name="room_seen",
                               scans_seen_by=SCANS_SEEN_BY)


_BUILDERS = {"object": _object_scene, "courtyard": _courtyard_scene, "room": _room_scene,
             "room_seen": _room_seen_scene, "street": _street_scene}


def build_scene(name: str, views: int, width: int, height: int, seed: int) -> SceneSpec:
    """The scene `name` with `views` cameras of `width` x `height` px, jittered by `seed`."""
    if name not in _BUILDERS:
        raise KeyError(name)
    rng = np.random.default_rng([seed, 0x5CE7E])
    return _BUILDERS[name](views, width, height, rng)
