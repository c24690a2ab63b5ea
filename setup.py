"""Package layout: the in-repo op library ``ops/`` is installed as ``fsdlite.ops``.

Metadata lives in pyproject.toml; this file only maps the packages and ships the
C++/CUDA sources, which ``fsdlite.ops.build`` compiles on first use (JIT, cached).
"""
from setuptools import find_packages, setup

packages = ['fsdlite'] + [f'fsdlite.{p}' for p in find_packages('fsdlite')]
op_packages = ['fsdlite.ops'] + [f'fsdlite.ops.{p}' for p in find_packages('ops')]
package_dir = {'fsdlite': 'fsdlite'}
package_dir.update({name: 'ops/' + '/'.join(name.split('.')[2:]) if name != 'fsdlite.ops' else 'ops'
                    for name in op_packages})

setup(
    packages=packages + op_packages,
    package_dir=package_dir,
    package_data={name: ['*.cpp', '*.cu', '*.h', '*.cuh', 'include/fsdlite_ops/*.h'] for name in op_packages},
    include_package_data=False,
)
