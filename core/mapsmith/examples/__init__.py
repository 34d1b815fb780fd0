"""Worked examples that ship with MapSmith, with the small datasets they run on (``data/``).

``data/river.geojson`` is one line, "Example Creek", near 46.2 N 122.2 W (WGS 84, CRS84 axis order).
``data/parcels.geojson`` is a 5 x 6 grid of 0.003-degree squares south of it (parcel_id P-01 ...
P-30, a land_use field). Both were written by hand for the example; they describe no real place.
"""
