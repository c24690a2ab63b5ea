"""Statistics of lidar frames, to hold simulated frames against real ones (tests, benchmarks/sim2real.py).

All frames are cropped to the camera's view. :func:`scan_statistics` pools frames and returns: points per frame,
the share of points per elevation band (upper block, middle, lower block of the HDL-64E), per range band, above
local ground, the reflectance quantiles and share of zeros, the median points on a car by distance, and how far the
cars are turned against the sensor's heading, how much lies just behind the cars, how far short of their far
end cars seen from an end are seen and how deep behind their boxes' near faces cars seen end-on are seen.
"""
import numpy as np
import torch

from fsdlite.ops import points_in_boxes, points_in_boxes_all
from fsdlite.structures.boxes import bev_corners, rotate_points

RANGE_BANDS = (0.0, 5.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0)
ELEVATION_BANDS = (-25.0, -15.0, -8.6, -4.0, 0.0, 4.0)  # degrees: below the camera, lower block, upper block
CAR_DISTANCE_BANDS = ((5.0, 15.0), (15.0, 25.0), (30.0, 50.0))
QUANTILES = (10, 25, 50, 75, 90, 99)
YAW_QUANTILES = (50, 75, 90)  #: of the cars' |yaw| against the sensor's heading, folded to [0, 90] degrees


def above_ground_share(points, cell=2.0, radius=40.0, height=0.3):
    """Share of the points within ``radius`` m that lie more than ``height`` m above their cell's 5th-percentile z."""
    xyz = np.asarray(points)[:, :3]
    xyz = xyz[np.hypot(xyz[:, 0], xyz[:, 1]) < radius]
    if len(xyz) == 0:
        return 0.0
    cells = np.floor(xyz[:, :2] / cell).astype(np.int64)
    _, inverse = np.unique(cells, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.lexsort((xyz[:, 2], inverse))
    starts = np.r_[0, np.flatnonzero(np.diff(inverse[order])) + 1]
    sizes = np.diff(np.r_[starts, len(order)])
    ground = xyz[order[starts + (0.05 * (sizes - 1)).astype(np.int64)], 2]
    return float((xyz[:, 2] - ground[inverse] > height).mean())


def clutter_behind_cars(points, boxes, depth=3.0, min_points=50):
    """Points just behind cars, counted against the points on them.

    For each car with at least ``min_points`` points at 0.2 m to its roof, the points at those heights that lie within
    its azimuth span (0.3 deg in from each edge), up to ``depth`` m beyond its farthest corner and in no car's box
    (grown by 0.2 m): what a detector must not mistake for more car. Returns ``(behind, on_cars)`` counts.
    """
    xyz = torch.from_numpy(np.ascontiguousarray(np.asarray(points, dtype=np.float32)[:, :3]))
    boxes = torch.from_numpy(np.asarray(boxes, dtype=np.float32).reshape(-1, 7))
    if not len(boxes):
        return 0, 0
    grown = boxes + boxes.new_tensor([0, 0, -0.1, 0.4, 0.4, 0.3, 0])
    in_any = points_in_boxes(xyz, grown) >= 0
    on = points_in_boxes_all(xyz, boxes + boxes.new_tensor([0, 0, 0.2, 0, 0, -0.2, 0]))  # (N, M) at car heights
    corners = bev_corners(boxes.double())                                                # (M, 4, 2)
    spans = torch.atan2(corners[..., 1], corners[..., 0])
    far = corners.norm(dim=-1).amax(1)
    azimuth, radius = torch.atan2(xyz[:, 1], xyz[:, 0]).double(), xyz[:, :2].double().norm(dim=1)
    behind = on_cars = 0
    margin = np.radians(0.3)
    for j, box in enumerate(boxes):
        if int(on[:, j].sum()) < min_points:
            continue
        heights = (xyz[:, 2] > box[2] + 0.2) & (xyz[:, 2] < box[2] + box[5])
        behind += int((heights & ~in_any & (azimuth > spans[j].min() + margin) & (azimuth < spans[j].max() - margin)
                       & (radius > far[j]) & (radius < far[j] + depth)).sum())
        on_cars += int(on[:, j].sum())
    return behind, on_cars


def _car_frame(xyz, box):
    """Points (N, 3) float64 in the frame of ``box`` (7,): ``(along, across, height)`` (N,) each, and the sensor's
    (2,) BEV position in that frame."""
    local = rotate_points(torch.cat([xyz, xyz.new_zeros(1, 3)]) - box[:3], -float(box[6]))  # last row: the sensor
    along, across, height = local[:-1].T
    return along, across, height, local[-1, :2]


def car_far_end_gaps(points, boxes, max_range=20.0, min_points=30):
    """How far short of its far end a car seen from one of its ends is seen.

    For each car within ``max_range`` m whose long axis points within 60 deg of the sensor (``|cos| >= 0.5``) and
    that has at least ``min_points`` points at 0.1 m to its roof (within its length + 0.05 m and width + 0.3 m, so
    that door mirrors count): half its length minus the farthest point's distance along the axis, away from the
    sensor. Rounded bumpers, glass and the sampling of a side seen at a glancing angle make it large; on real scans
    the side is seen to the far end of the box. Returns a (K,) array in metres.
    """
    xyz = torch.from_numpy(np.asarray(points, dtype=np.float64)[:, :3].copy())
    gaps = []
    for box in torch.from_numpy(np.asarray(boxes, dtype=np.float64).reshape(-1, 7)):
        along, across, height, sensor = _car_frame(xyz, box)
        on = ((along.abs() < 0.5 * box[3] + 0.05) & (across.abs() < 0.5 * box[4] + 0.3) & (height > 0.1)
              & (height < box[5]))
        if box[:2].norm() > max_range or on.sum() < min_points or sensor[0].abs() < 0.5 * sensor.norm():
            continue
        gaps.append(float(0.5 * box[3] - (-torch.sign(sensor[0]) * along[on]).max()))
    return np.array(gaps, dtype=np.float64)


def car_near_face_depths(points, boxes, max_view=15.0, max_range=40.0, min_points=20):
    """How deep behind its box's near face a car seen end-on is seen.

    For each car within ``max_range`` m whose long axis points within ``max_view`` degrees of the sensor and that has
    at least ``min_points`` points on its lower body (0.2-0.6 of its height, the middle 80 % of its width, from
    0.3 m in front of the box's near face to its far face): the median distance of those points behind the near
    face, along the axis. Bumpers, ends that lean back and round into the corners make it positive; a detector
    that learned upright ends puts such a car's box too far from the sensor. Returns a (K,) array in metres.
    """
    xyz = torch.from_numpy(np.asarray(points, dtype=np.float64)[:, :3].copy())
    depths = []
    for box in torch.from_numpy(np.asarray(boxes, dtype=np.float64).reshape(-1, 7)):
        along, across, height, sensor = _car_frame(xyz, box)
        if box[:2].norm() > max_range or sensor[0].abs() < np.cos(np.radians(max_view)) * sensor.norm():
            continue
        depth = 0.5 * box[3] - torch.sign(sensor[0]) * along  # behind the face towards the sensor
        on = ((depth > -0.3) & (depth < box[3]) & (across.abs() < 0.4 * box[4]) & (height > 0.2 * box[5])
              & (height < 0.6 * box[5]))
        if on.sum() >= min_points:
            depths.append(float(depth[on].median()))
    return np.array(depths, dtype=np.float64)


def labelled_frames(dataset, count=None):
    """``(points, car_boxes, pedestrian_boxes)`` of a dataset's first ``count`` frames (default: all), the input of
    :func:`scan_statistics`; the dataset's classes must begin with ``('Car', 'Pedestrian')``."""
    classes = tuple(dataset.metainfo['classes'][:2])
    if classes != ('Car', 'Pedestrian'):
        raise ValueError(f"labelled_frames: the dataset's classes must begin with ('Car', 'Pedestrian'), got "
                         f"{dataset.metainfo['classes']}")
    for i in range(len(dataset) if count is None else count):
        r = dataset.raw_results(i)
        boxes, labels = r['gt_bboxes_3d'].numpy(), r['gt_labels_3d'].numpy()
        yield r['points'].numpy(), boxes[labels == 0], boxes[labels == 1]


def scan_statistics(frames):
    """Pooled statistics of frames.

    Args:
        frames (iterable): ``(points (N, 4) array, car_boxes (M, 7) array[, pedestrian_boxes (P, 7) array])`` per
            frame (camera-view points, lidar boxes of the labelled cars and, optionally, pedestrians).
    Returns:
        dict: ``points_per_frame`` (mean), ``cars_per_frame`` (mean number of labelled cars with >= 1 point),
        ``elevation_share`` (len(ELEVATION_BANDS) - 1,), ``range_share``
        (len(RANGE_BANDS) - 1,), ``above_ground`` (mean share per frame), ``reflectance_quantiles`` (QUANTILES),
        ``zero_reflectance``, ``car_points`` (median per band of CAR_DISTANCE_BANDS; NaN without cars),
        ``car_reflectance_median``, ``car_yaw_quantiles`` (YAW_QUANTILES of the cars' |yaw| in degrees, a box
        and its 180-degree turn being one; NaN without cars), ``clutter_behind_cars`` (pooled
        :func:`clutter_behind_cars`: points behind per point on the cars; NaN without cars),
        ``car_far_end_gap`` (median of :func:`car_far_end_gaps`, m; NaN without such cars),
        ``car_near_face_depth`` (median of :func:`car_near_face_depths`, m; NaN without such cars) and
        ``pedestrian_reflectance`` (median over the pedestrians with >= 10 points of their median reflectance; NaN
        without).
    """

    counts, ranges, elevations, reflectance, above, car_points, car_refl, yaws = [], [], [], [], [], [], [], []
    clutter, far_gaps, face_depths, people, cars = np.zeros(2), [], [], [], []
    for points, boxes, *pedestrians in frames:
        points = np.asarray(points, dtype=np.float32)
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 7)
        people += _reflectance_per_object(points, *pedestrians)
        counts.append(len(points))
        xyz = points[:, :3]
        ranges.append(np.linalg.norm(xyz, axis=1))
        elevations.append(np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1]))))
        reflectance.append(points[:, 3])
        above.append(above_ground_share(points))
        cars.append(0)
        if len(boxes):
            inside = points_in_boxes(torch.from_numpy(points), torch.from_numpy(boxes)).numpy()
            per_car = np.bincount(inside[inside >= 0], minlength=len(boxes))
            car_points += list(zip(np.hypot(boxes[:, 0], boxes[:, 1]), per_car))
            cars[-1] = int((per_car >= 1).sum())
            car_refl.append(points[inside >= 0, 3])
            yaws.append(np.abs(np.degrees((boxes[:, 6] + np.pi / 2) % np.pi - np.pi / 2)))
            clutter += clutter_behind_cars(points, boxes)
            far_gaps.append(car_far_end_gaps(points, boxes))
            face_depths.append(car_near_face_depths(points, boxes))
    ranges, elevations, reflectance = (np.concatenate(v) for v in (ranges, elevations, reflectance))
    car_points = np.array(car_points, dtype=np.float64).reshape(-1, 2)
    medians = []
    for lo, hi in CAR_DISTANCE_BANDS:
        band = car_points[(car_points[:, 0] >= lo) & (car_points[:, 0] < hi), 1]
        medians.append(float(np.median(band)) if len(band) else float('nan'))
    car_refl = np.concatenate(car_refl) if car_refl else np.zeros(0)
    yaws = np.concatenate(yaws) if yaws else np.zeros(0)
    far_gaps = np.concatenate(far_gaps) if far_gaps else np.zeros(0)
    face_depths = np.concatenate(face_depths) if face_depths else np.zeros(0)
    return dict(points_per_frame=float(np.mean(counts)), cars_per_frame=float(np.mean(cars)),
                elevation_share=np.histogram(elevations, ELEVATION_BANDS)[0] / max(len(elevations), 1),
                range_share=np.histogram(ranges, RANGE_BANDS)[0] / max(len(ranges), 1),
                above_ground=float(np.mean(above)),
                reflectance_quantiles=np.percentile(reflectance, QUANTILES),
                zero_reflectance=float((reflectance == 0).mean()),
                car_points=np.array(medians),
                car_reflectance_median=float(np.median(car_refl)) if len(car_refl) else float('nan'),
                car_yaw_quantiles=(np.percentile(yaws, YAW_QUANTILES) if len(yaws)
                                   else np.full(len(YAW_QUANTILES), np.nan)),
                clutter_behind_cars=float(clutter[0] / clutter[1]) if clutter[1] else float('nan'),
                car_far_end_gap=float(np.median(far_gaps)) if len(far_gaps) else float('nan'),
                car_near_face_depth=float(np.median(face_depths)) if len(face_depths) else float('nan'),
                pedestrian_reflectance=float(np.median(people)) if people else float('nan'))


def _reflectance_per_object(points, boxes=None, min_points=10):
    """Median reflectance of each box's points, for the boxes with at least ``min_points`` points."""
    boxes = np.zeros((0, 7), np.float32) if boxes is None else np.asarray(boxes, dtype=np.float32).reshape(-1, 7)
    if not len(boxes):
        return []
    inside = points_in_boxes(torch.from_numpy(points), torch.from_numpy(boxes)).numpy()
    return [float(np.median(points[inside == j, 3])) for j in range(len(boxes)) if (inside == j).sum() >= min_points]


def format_statistics(rows):
    """A text table of ``[(name, statistics), ...]`` side by side."""
    names = [n for n, _ in rows]
    lines = [f'{"statistic":<34}' + ''.join(f'{n:>22}' for n in names)]

    def add(label, values):
        lines.append(f'{label:<34}' + ''.join(f'{v:>22}' for v in values))

    add('points per frame', [f"{s['points_per_frame']:.0f}" for _, s in rows])
    add('labelled cars per frame', [f"{s['cars_per_frame']:.1f}" for _, s in rows])
    for i, (lo, hi) in enumerate(zip(ELEVATION_BANDS[:-1], ELEVATION_BANDS[1:])):
        add(f'share at elevation {lo:g}..{hi:g} deg', [f"{s['elevation_share'][i]:.3f}" for _, s in rows])
    for i, (lo, hi) in enumerate(zip(RANGE_BANDS[:-1], RANGE_BANDS[1:])):
        add(f'share at range {lo:g}-{hi:g} m', [f"{s['range_share'][i]:.3f}" for _, s in rows])
    add('share > 0.3 m above ground', [f"{s['above_ground']:.3f}" for _, s in rows])
    add('reflectance q' + '/'.join(map(str, QUANTILES)),
        ['/'.join(f'{q:.2f}' for q in s['reflectance_quantiles'][1:5]) for _, s in rows])
    add('zero reflectance share', [f"{s['zero_reflectance']:.3f}" for _, s in rows])
    for i, (lo, hi) in enumerate(CAR_DISTANCE_BANDS):
        add(f'median points on a car {lo:g}-{hi:g} m', [f"{s['car_points'][i]:.0f}" for _, s in rows])
    add('median reflectance on cars', [f"{s['car_reflectance_median']:.2f}" for _, s in rows])
    add('car |yaw| deg q' + '/'.join(map(str, YAW_QUANTILES)),
        ['/'.join(f'{q:.1f}' for q in s['car_yaw_quantiles']) for _, s in rows])
    add('points 0-3 m behind cars / on them', [f"{s['clutter_behind_cars']:.3f}" for _, s in rows])
    add('car seen short of its far end, m', [f"{s['car_far_end_gap']:.2f}" for _, s in rows])
    add('end-on car seen behind its box, m', [f"{s['car_near_face_depth']:.2f}" for _, s in rows])
    add('median reflectance on pedestrians', [f"{s['pedestrian_reflectance']:.2f}" for _, s in rows])
    return '\n'.join(lines)


__all__ = ['scan_statistics', 'labelled_frames', 'format_statistics', 'above_ground_share', 'clutter_behind_cars',
           'car_far_end_gaps', 'car_near_face_depths', 'RANGE_BANDS', 'ELEVATION_BANDS', 'CAR_DISTANCE_BANDS',
           'QUANTILES', 'YAW_QUANTILES']
