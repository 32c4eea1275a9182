"""Token counts, prefix tokens, patch-embedding PCA and position-embedding similarity,
checked against torch's convolution, timm's own patch embedding, sklearn and the capture."""

import numpy as np
import pytest
import timm
import torch
from sklearn.decomposition import PCA
from sklearn.metrics.pairwise import cosine_similarity
from threadpoolctl import threadpool_limits
from timm.layers import PatchEmbed

from xai_core import pipeline
from xai_core.analysis import tokens
from xai_core.images import load_sample
from xai_core.models.knn import Neighbour
from xai_core.models import get_model


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """Small SVDs are far slower with many BLAS threads on a busy 2-core machine."""
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def distilled():
    return get_model("deit-s16-distilled", random_weights=True)


@pytest.mark.parametrize("height, width, patch, prefix, patches, total", [
    (224, 224, 16, 1, 196, 197),   # ViT-B/16, DeiT
    (224, 224, 14, 1, 256, 257),   # DINOv2 ViT-S/14 at 224 px
    (224, 224, 16, 2, 196, 198),   # distilled DeiT: [CLS] + [DIST]
    (518, 518, 14, 5, 1369, 1374),  # DINOv2 with 4 registers at its training size
    (384, 384, 16, 1, 576, 577),
])
def test_divisible_counts(height, width, patch, prefix, patches, total):
    count = tokens.token_count(height, width, patch, prefix)
    assert count.divisible and count.dropped_pixels == 0
    assert (count.num_patches, count.num_tokens) == (patches, total)
    assert count.padded_tokens == total


@pytest.mark.parametrize("height, width, patch", [(225, 230, 16), (100, 37, 14), (16, 17, 16),
                                                  (224, 224, 15)])
def test_non_divisible_counts_match_conv_and_padded_patch_embed(height, width, patch):
    count = tokens.token_count(height, width, patch, prefix=1)
    assert not count.divisible
    pixels = torch.zeros(1, 3, height, width)
    conv = torch.nn.Conv2d(3, 1, patch, stride=patch)  # the floor oracle
    assert conv(pixels).shape[-2:] == (count.rows, count.cols)
    padded = PatchEmbed(img_size=(height, width), patch_size=patch, in_chans=3, embed_dim=4,
                        strict_img_size=False, dynamic_img_pad=True)  # the ceil oracle
    assert padded(pixels).shape[1] + 1 == count.padded_tokens
    assert count.leftover_rows == height - count.rows * patch
    assert count.dropped_pixels == height * width - count.num_patches * patch * patch


@pytest.mark.parametrize("height, width, patch", [(10, 224, 16), (224, 13, 14), (0, 5, 1)])
def test_image_smaller_than_a_patch_is_refused(height, width, patch):
    with pytest.raises(tokens.TokenError, match="smaller than one|whole number"):
        tokens.token_count(height, width, patch)


def test_bundled_model_count_matches_its_capture(dinov2):
    capture = pipeline.vit_capture(dinov2, load_sample("chelsea"))
    height, width = dinov2.spec.input_size
    count = tokens.token_count(height, width, capture.layout.patch_size[0],
                               len(tokens.prefix_token_names(dinov2.module)))
    assert (count.rows, count.cols) == capture.layout.grid == (16, 16)
    assert count.num_tokens == capture.blocks[0].acts["k"].shape[2] == 257


def test_distilled_model_has_cls_and_dist(distilled):
    assert tokens.prefix_token_names(distilled.module) == ["[CLS]", "[DIST]"]
    capture = pipeline.vit_capture(distilled, load_sample("coffee"))
    count = tokens.token_count(224, 224, 16, 2)
    assert count.num_tokens == capture.blocks[0].acts["k"].shape[2] == 198


def test_register_model_prefix_names_and_table_without_prefix_rows():
    module = timm.create_model("vit_small_patch14_reg4_dinov2", pretrained=False, img_size=56)
    assert tokens.prefix_token_names(module) == ["[CLS]", "[REG1]", "[REG2]", "[REG3]",
                                                 "[REG4]"]
    similarity = tokens.position_similarity(module)
    assert similarity.grid == (4, 4) and similarity.prefix_in_table == 0
    assert not tokens.cls_joins_late(module)


def test_cait_appends_cls_late():
    assert tokens.cls_joins_late(timm.create_model("cait_xxs24_224", pretrained=False))


def test_position_similarity_is_symmetric_with_unit_diagonal(dinov2):
    similarity = tokens.position_similarity(dinov2.module)
    assert similarity.grid == tuple(dinov2.module.patch_embed.grid_size)
    assert similarity.prefix_in_table == dinov2.module.num_prefix_tokens == 1
    matrix = similarity.matrix
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-12)
    np.testing.assert_allclose(matrix, matrix.T, atol=1e-12)
    assert matrix.min() >= -1 - 1e-12 and matrix.max() <= 1 + 1e-12
    table = dinov2.module.pos_embed[0, 1:].double().numpy()  # oracle: sklearn cosine
    np.testing.assert_allclose(matrix, cosine_similarity(table), atol=1e-9)
    # a trained table: a patch's right-hand neighbour is more alike than the far corner
    rows, cols = similarity.grid
    assert similarity.similarity[0, 0, 0, 1] > similarity.similarity[0, 0, rows - 1, cols - 1]


def test_position_similarity_distilled_skips_both_prefix_rows(distilled):
    similarity = tokens.position_similarity(distilled.module)
    assert similarity.prefix_in_table == 2 and similarity.grid == (14, 14)
    table = distilled.module.pos_embed[0, 2:].double().numpy()
    np.testing.assert_allclose(similarity.matrix, cosine_similarity(table), atol=1e-9)


def test_embedding_pca_matches_sklearn(dinov2):
    pca = tokens.patch_embedding_pca(dinov2.module, components=28)
    weight = dinov2.module.patch_embed.proj.weight.detach().double()
    dim, channels, ph, pw = weight.shape
    assert pca.e_shape == (ph * pw * channels, dim) == (588, 384)
    filters = weight.permute(0, 2, 3, 1).reshape(dim, -1).numpy()
    oracle = PCA(n_components=28, svd_solver="full").fit(filters)
    np.testing.assert_allclose(pca.explained, oracle.explained_variance_ratio_, rtol=1e-6)
    ours = pca.components.reshape(28, -1)
    signs = np.sign((ours * oracle.components_).sum(1))
    np.testing.assert_allclose(ours * signs[:, None], oracle.components_, atol=1e-6)
    tiles = pca.tiles()
    assert tiles.shape == (28, ph, pw, 3) and tiles.min() >= 0 and tiles.max() <= 1


def test_models_without_the_pieces_say_so():
    cnn = timm.create_model("resnet18", pretrained=False)
    with pytest.raises(tokens.TokenError, match="patch embedding"):
        tokens.patch_embedding_pca(cnn)
    with pytest.raises(tokens.TokenError, match="position table"):
        tokens.position_similarity(cnn)


def test_neighbour_sources_are_described():
    near = tokens.describe_neighbours([Neighbour(3, "cat", "chelsea#3", 0.9),
                                       Neighbour(0, "cup", "coffee#0", 0.8),
                                       Neighbour(50, "dog", "upload:ab12cd34#0", 0.7)])
    assert [(n.sample_id, n.view) for n in near] == [("chelsea", 3), ("coffee", 0), (None, 0)]
    assert near[0].similarity == pytest.approx(0.9)
    assert max(tokens.sample_thumbnail("chelsea").size) <= 160
