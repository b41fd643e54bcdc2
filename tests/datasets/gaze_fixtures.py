"""REFLACX and EGD-CXR fixtures written in the exact native formats of their PhysioNet releases.

REFLACX (ricbl/eyetracking, post_processing_and_dataset_generation/create_main_table.py): CSVs written by pandas
with CRLF line ends (save_csv, :26-31), booleans as True/False, the 0-decimal columns as whole numbers
(round_dataframe, :33-40); metadata columns :388, fixations columns :132-150, ellipse columns :370 (the phase's
sorted label list, :296). EGD-CXR (cxr-eye-gaze/eye-gaze-dataset): master_sheet.csv with dicom_id, path and the
CheXpert-labeler columns <finding>__chx (DataPreparation/Sample_CXR_eye_gaze_dataset.ipynb), fixations.csv with
the Gazepoint columns and X_ORIGINAL/Y_ORIGINAL (DataPostProcessing/create_heatmap_images_and_or_videos.py).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from fixtures import gradient, write_jpg

PHASE1_LABELS = sorted(["Airway wall thickening", "Atelectasis", "Consolidation", "Emphysema",
                        "Enlarged cardiac silhouette", "Fibrosis", "Fracture", "Groundglass opacity", "Mass", "Nodule",
                        "Pleural effusion", "Pleural thickening", "Pneumothorax", "Pulmonary edema", "Quality issue",
                        "Support devices", "Wide mediastinum"])
PHASE3_LABELS = sorted(["Abnormal mediastinal contour", "Acute fracture", "Atelectasis", "Consolidation",
                        "Enlarged cardiac silhouette", "Enlarged hilum", "Groundglass opacity", "Hiatal hernia",
                        "High lung volume / emphysema", "Interstitial lung disease", "Lung nodule or mass",
                        "Pleural abnormality", "Pneumothorax", "Pulmonary edema", "Quality issue", "Support devices"])
META = ["id", "split", "eye_tracking_data_discarded", "image", "dicom_id", "subject_id", "image_size_x", "image_size_y"]
FIX_COLUMNS = ["timestamp_start_fixation", "timestamp_end_fixation", "x_position", "y_position", "pupil_area_normalized",
               "angular_resolution_x_pixels_per_degree", "angular_resolution_y_pixels_per_degree", "window_width",
               "window_level", "xmin_shown_from_image", "ymin_shown_from_image", "xmax_shown_from_image",
               "ymax_shown_from_image", "xmin_in_screen_coordinates", "ymin_in_screen_coordinates",
               "xmax_in_screen_coordinates", "ymax_in_screen_coordinates"]

# image: (dicom_id, subject, study, (height, width), split)
IMAGES = {
    "1a2b3c4d-00000001": ("10000032", "50414267", (60, 80), "train"),
    "1a2b3c4d-00000002": ("10000764", "57375967", (64, 48), "train"),
    "1a2b3c4d-00000003": ("10001122", "55000001", (50, 70), "test"),
}
# readings: id -> (phase, dicom_id, discarded, {label: value}, fixations [(t0, t1, x, y, ppd_x, ppd_y)],
#                  ellipses [(xmin, ymin, xmax, ymax, certainty, [labels])])
READINGS = {
    "P101R000001": (1, "1a2b3c4d-00000001", False,
                    {"Pleural effusion": 4, "Enlarged cardiac silhouette": 2, "Support devices": True},
                    [(0.105, 0.412, 20, 30, 31, 33), (0.5, 0.9, 55, 41, 30, 30), (1.0, 1.2, 79, 59, 28, 32),
                     (1.3, 1.75, -4, 12, 30, 30)],
                    [(5, 30, 30, 58, 4, ["Pleural effusion"]), (50, 35, 78, 57, 3, ["Pleural effusion"]),
                     (20, 10, 60, 50, 2, ["Enlarged cardiac silhouette"])]),
    "P101R000002": (1, "1a2b3c4d-00000001", True, {"Pleural effusion": 3, "Atelectasis": 5}, [],
                    [(10, 35, 40, 55, 3, ["Pleural effusion", "Atelectasis"])]),
    "P101R000003": (1, "1a2b3c4d-00000001", False, {"Pneumothorax": 5}, [(0.0, 0.25, 60, 8, 40, 44)],
                    [(45, 2, 75, 20, 5, ["Pneumothorax"])]),
    "P300R000004": (3, "1a2b3c4d-00000002", False, {"Lung nodule or mass": 5, "Acute fracture": 1},
                    [(0.2, 0.45, 30, 20, 25, 25), (0.5, 0.62, 31, 22, 27, 25), (0.7, 1.1, 10, 50, 29, 29)],
                    [(24, 14, 36, 26, 5, ["Lung nodule or mass"]), (2, 2, 12, 12, 2, ["Acute fracture"])]),
    "P300R000005": (3, "1a2b3c4d-00000003", False, {"Pulmonary edema": 3},
                    [(0.0, 0.3, 35, 25, 20, 22)], [(5, 5, 65, 45, 3, ["Pulmonary edema"])]),
}


def _csv(path: Path, header, rows) -> None:
    """As pandas' to_csv with newline='\\r\\n' (create_main_table.py:26-31)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    path.write_bytes(buf.getvalue().encode())


def _num(v) -> str:
    return str(v) if not isinstance(v, bool) else ("True" if v else "False")


def write_reflacx(root: Path, readings=None, images=None, *, jpgs: bool = True) -> dict:
    readings = READINGS if readings is None else readings
    images = IMAGES if images is None else images
    main = root / "main_data"
    for phase, labels in ((1, PHASE1_LABELS), (2, PHASE3_LABELS), (3, PHASE3_LABELS)):
        rows = []
        for rid, (ph, did, discarded, lab, fix, ell) in readings.items():
            if ph != phase:
                continue
            subject, study, (h, w), split = images[did]
            image = f"physionet.org/files/mimic-cxr/2.0.0/files/p{subject[:2]}/p{subject}/s{study}/{did}.dcm"
            vals = [_num(lab.get(k, False if k in ("Support devices", "Quality issue") else 0)) for k in labels]
            rows.append([rid, split, _num(discarded), image, did, subject, str(w), str(h), *vals])
            folder = main / rid
            folder.mkdir(parents=True, exist_ok=True)
            _csv(folder / "anomaly_location_ellipses.csv", ["xmin", "ymin", "xmax", "ymax", "certainty", *labels],
                 [[x0, y0, x1, y1, c, *[_num(k in ls) for k in labels]] for x0, y0, x1, y1, c, ls in ell])
            _csv(folder / "chest_bounding_box.csv", ["xmin", "ymin", "xmax", "ymax"], [[1, 1, w - 1, h - 1]])
            if not discarded:
                _csv(folder / "fixations.csv", FIX_COLUMNS,
                     [[t0, t1, x, y, 0.812, rx, ry, 4095.0, 2047.5, 0, 0, w, h, 100, 0, 1800, 1080]
                      for t0, t1, x, y, rx, ry in fix])
        if rows:
            _csv(main / f"metadata_phase_{phase}.csv", [*META, *labels], sorted(rows))
    if jpgs:
        for did, (subject, study, (h, w), _split) in images.items():
            write_jpg(root / f"files/p{subject[:2]}/p{subject}/s{study}/{did}.jpg", gradient(h, w))
    return {"readings": readings, "images": images}


CHX = ["atelectasis__chx", "cardiomegaly__chx", "consolidation__chx", "edema__chx", "enlarged_cardiomediastinum__chx",
       "fracture__chx", "lung_lesion__chx", "lung_opacity__chx", "no_finding__chx", "pleural_effusion__chx",
       "pleural_other__chx", "pneumonia__chx", "pneumothorax__chx", "support_devices__chx"]
SHEET = ["dicom_id", "path", "study_id", "patient_id", "stay_id", "gender", "anchor_age", "image_top_pad",
         "image_bottom_pad", "image_left_pad", "image_right_pad", "Normal", "CHF", "pneumonia", *CHX]
GP_COLUMNS = ["SESSION_ID", "MEDIA_ID", "DICOM_ID", "CNT", "Time (in secs)", "TIMETICK(f=10000000)", "FPOGX", "FPOGY",
              "FPOGS", "FPOGD", "FPOGID", "FPOGV", "BPOGX", "BPOGY", "BPOGV", "X_ORIGINAL", "Y_ORIGINAL"]
EGD_IMAGES = {  # dicom_id: (subject, study, (h, w), {chx column: value})
    "2b3c4d5e-00000001": ("10039272", "50384423", (64, 80), {"cardiomegaly__chx": "1.0", "edema__chx": "-1.0",
                                                            "pleural_effusion__chx": "0.0"}),
    "2b3c4d5e-00000002": ("10101795", "54300643", (72, 60), {"pneumonia__chx": "1.0", "no_finding__chx": ""}),
}
# fixation rows: (dicom_id, FPOGD, FPOGID, FPOGV, X_ORIGINAL, Y_ORIGINAL); "calib" rows are a calibration image
EGD_FIXATIONS = [
    ("2b3c4d5e-00000001", 0.24, 11, 1, 40, 30),
    ("2b3c4d5e-00000001", 0.10, 12, 1, 10, 20),
    ("2b3c4d5e-00000001", 0.31, 12, 1, 11, 21),   # the same fixation again, longer: one fixation (11, 21, 0.31)
    ("2b3c4d5e-00000001", 0.50, 13, 0, 70, 60),   # not valid: dropped
    ("2b3c4d5e-00000001", 0.40, 14, 1, -1, -1),   # off the image: kept, falls on no map
    ("2b3c4d5e-0000", 0.30, 15, 1, 900, 500),     # the calibration image shown every 20 cases: not a case
    ("2b3c4d5e-00000002", 0.0, 21, 1, 30, 30),    # zero duration: dropped
    ("2b3c4d5e-00000002", 0.22, 22, 1, 30, 36),
    ("2b3c4d5e-00000002", 0.18, 23, 1, 50, 10),
]


def write_egd(root: Path, images=None, fixations=None, *, jpgs: bool = True) -> None:
    images = EGD_IMAGES if images is None else images
    fixations = EGD_FIXATIONS if fixations is None else fixations
    rows = []
    for did, (subject, study, _hw, chx) in images.items():
        path = f"files/p{subject[:2]}/p{subject}/s{study}/{did}.dcm"
        rows.append([did, path, study, subject, "", "F", "40 - 50", 0, 0, 100, 100, 0, 1, 0,
                     *[chx.get(c, "") for c in CHX]])
    _csv(root / "master_sheet.csv", SHEET, rows)
    out = []
    for k, (did, d, fid, v, x, y) in enumerate(fixations):
        out.append([1, 1, did, k, round(0.5 + k * 0.3, 3), 1000 + k, 0.5, 0.5, 0.1 * k, d, fid, v, 0.5, 0.5, 1, x, y])
    _csv(root / "fixations.csv", GP_COLUMNS, out)
    _csv(root / "bounding_boxes.csv", ["dicom_id", "bbox_name", "x1", "x2", "y1", "y2"],
         [[did, "right lung", 1, 20, 1, 40] for did in images])
    if jpgs:
        for did, (subject, study, (h, w), _chx) in images.items():
            write_jpg(root / f"files/p{subject[:2]}/p{subject}/s{study}/{did}.jpg", gradient(h, w))
