"""The serving side of a class: one model server for many learners, and how the lab starts one."""
