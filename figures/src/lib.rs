//! expertsim figures: plotters charts rendered to PNG and SVG with an embedded font.
